"""Reading many runs for the CLI: the visibility store's list, stuck runs, pending approvals.

A run's row comes from Temporal's visibility store: the ledger memo and the search attributes
the start request sets and the workflow writes when they change meaningfully (`TowlineAgent`,
`TowlineStatus`, `TowlineRunStep`, `TowlineToolCalls`, `TowlineTotalTokens`,
`TowlineAgentVersion`, and `TowlineCostMicros` when the spend is known: the visible counters,
exact at the end and at every status change, at most 10 steps behind between), Temporal's own
fields (status, start and close time), and for a live run the latest counters its history
records, read from its end (exact: `towline.cli.ledger_view`).
The store is eventually consistent: a change shows there a moment after it happens.
Stuck runs need `describe` of each live run; pending approvals need its `state` query.
Nothing here prints (`towline.cli.render` formats).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecution
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError, RPCStatusCode

from towline.cli.common import EXIT_USAGE, CliError, one_line
from towline.cli.ledger_view import latest_recorded
from towline.cli.runstate import (
    PendingApproval,
    TaskFailure,
    agent_name,
    attributes,
    cost_micros,
    describe_run,
    memo_counters,
    memo_json,
    oldest_first,
    pending_from_state,
    query_state,
    status_name,
    task_failure,
    workers_polling,
)
from towline.results import Counters, RunStatus, StateQueryResult
from towline.runtime import search_attributes as attribute
from towline.workflows.waiting import WAITING_MEMO

__all__ = [
    "STATUSES",
    "SCAN_LIMIT",
    "quoted",
    "runs_query",
    "RunRow",
    "list_runs",
    "StuckRun",
    "stuck_runs",
    "PendingScan",
    "pending_approvals",
]

STATUSES = (RunStatus.RUNNING, RunStatus.WAITING, RunStatus.SUCCEEDED, RunStatus.FAILED,
            "terminated", "cancelled", "timed-out")
"""What `--status` accepts; a run's status as `towline runs` shows it."""
SCAN_LIMIT = 1000
"""At most this many live runs are described (stuck) or queried (pending) per command."""
_CONCURRENCY = 16

_STATUS = attribute.STATUS.name
_STATUS_QUERIES = {
    RunStatus.RUNNING: f'ExecutionStatus = "Running" AND ({_STATUS} IS NULL OR {_STATUS} != '
                       f'"{RunStatus.WAITING}")',
    RunStatus.WAITING: f'ExecutionStatus = "Running" AND {_STATUS} = "{RunStatus.WAITING}"',
    RunStatus.SUCCEEDED: 'ExecutionStatus = "Completed"',
    RunStatus.FAILED: 'ExecutionStatus = "Failed"',
    "terminated": 'ExecutionStatus = "Terminated"',
    "cancelled": 'ExecutionStatus = "Canceled"',
    "timed-out": 'ExecutionStatus = "TimedOut"',
}

T = TypeVar("T")
R = TypeVar("R")


def quoted(value: str) -> str:
    """`value` as a string literal of Temporal's list filter."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def runs_query(
    *, agent: str | None = None, status: str | None = None, query: str | None = None,
    live: bool = False, version: str | None = None, schedule: str | None = None,
) -> str:
    """The list filter of towline's runs (the latest execution of each), narrowed as asked."""
    parts = ['WorkflowType = "AgentRun"', 'ExecutionStatus != "ContinuedAsNew"']
    if live:
        parts.append('ExecutionStatus = "Running"')
    if agent:
        parts.append(f"{attribute.AGENT.name} = {quoted(agent)}")
    if version:
        parts.append(f"{attribute.AGENT_VERSION.name} = {quoted(version)}")
    if schedule:  # Temporal sets it on every run a schedule starts
        parts.append(f"TemporalScheduledById = {quoted(schedule)}")
    if status:
        parts.append(f"({_STATUS_QUERIES[status]})")
    if query and query.strip():
        parts.append(f"({query})")
    return " AND ".join(parts)


@dataclass(frozen=True)
class RunRow:
    """One run as the visibility store lists it."""

    workflow_id: str
    run_id: str
    agent: str | None
    status: str
    run_step: int | None
    tool_calls: int | None
    total_tokens: int | None
    cost_micros: int | None
    started: datetime | None
    closed: datetime | None
    task_queue: str
    agent_version: str | None = None
    """The version of the agent definition the run started with (None: before versions)."""
    waiting_for: str | None = None
    """What a waiting run waits for: approval, tool_result (a client's) or message."""

    @classmethod
    async def of(cls, execution: WorkflowExecution, codec: PayloadCodec | None,
                 confirmed: Counters | None = None) -> RunRow:
        """The row of a listed (or described) execution; `confirmed`: a live run's latest
        counters, read from its history (`towline.cli.ledger_view.latest_recorded`)."""
        found = attributes(execution.typed_search_attributes)
        counters = confirmed or await memo_counters(execution, codec)

        def figure(name: str, ledger: int | None) -> int | None:
            # the history's (live) or the memo's (closed: exact at the end) first; the Int
            # attributes are written when due (sparsely), and only where registered
            value = found.get(name) if ledger is None else ledger
            return value if isinstance(value, int) else None

        return cls(
            workflow_id=execution.id, run_id=execution.run_id, agent=found.get(attribute.AGENT.name),
            status=status_name(execution.status, found.get(attribute.STATUS.name)),
            run_step=figure(attribute.RUN_STEP.name, counters and counters.run_step),
            tool_calls=figure(attribute.TOOL_CALLS.name, counters and counters.tool_calls),
            total_tokens=figure(attribute.TOTAL_TOKENS.name, counters and counters.total_tokens),
            cost_micros=cost_micros(found, counters),
            started=execution.start_time, closed=execution.close_time,
            task_queue=execution.task_queue,
            agent_version=found.get(attribute.AGENT_VERSION.name) or (counters and counters.agent_version),
            waiting_for=await _waiting_for(execution),
        )

    @property
    def live(self) -> bool:
        """Whether the run has not closed."""
        return self.closed is None

    def duration(self, now: datetime) -> timedelta | None:
        """How long it ran (or has been running by `now`)."""
        if self.started is None:
            return None
        return (self.closed or now) - self.started

    def to_json(self, now: datetime) -> dict[str, Any]:
        """The JSON form of `towline runs --json`."""
        took = self.duration(now)
        return {
            "workflow_id": self.workflow_id, "run_id": self.run_id, "agent": self.agent,
            "status": self.status, "run_step": self.run_step, "tool_calls": self.tool_calls,
            "total_tokens": self.total_tokens, "cost_micros": self.cost_micros,
            "started": self.started.isoformat() if self.started else None,
            "closed": self.closed.isoformat() if self.closed else None,
            "duration_seconds": round(took.total_seconds(), 3) if took is not None else None,
            "task_queue": self.task_queue, "agent_version": self.agent_version,
            "waiting_for": self.waiting_for,
        }

    @property
    def shown_status(self) -> str:
        """The status as `towline runs` prints it: `waiting` says what for."""
        return f"waiting: {self.waiting_for}" if self.status == RunStatus.WAITING and self.waiting_for \
            else self.status


async def _waiting_for(execution: WorkflowExecution) -> str | None:
    if execution.close_time is not None or WAITING_MEMO not in execution.raw_info.memo.fields:
        return None
    value = await memo_json(execution, WAITING_MEMO)
    return value if isinstance(value, str) else None


async def _executions(client: Client, query: str, limit: int) -> list[WorkflowExecution]:
    try:
        return [e async for e in client.list_workflows(query, limit=limit)]
    except RPCError as e:
        if e.status == RPCStatusCode.INVALID_ARGUMENT:
            raise CliError(f"invalid --query: {one_line(e.message)}", EXIT_USAGE) from None
        raise CliError(f"cannot list runs: {one_line(e)}") from None


async def list_runs(client: Client, query: str, limit: int) -> list[RunRow]:
    """Up to `limit` runs matching `query`, in the visibility store's order.

    That order is Temporal's own (the UI's): live runs first, newest first, then closed
    runs, most recently closed first.
    """
    codec = client.data_converter.payload_codec

    async def row(e: WorkflowExecution) -> RunRow:
        # a live run's visible counters may be up to ATTRIBUTE_STEPS steps behind: its
        # history's latest record is exact (one read from the history's end)
        live = e.close_time is None
        confirmed = await latest_recorded(client, e.id, e.run_id) if live else None
        return await RunRow.of(e, codec, confirmed)

    return await _each(await _executions(client, query, limit), row)


async def _each(items: Sequence[T], fn: Callable[[T], Awaitable[R]]) -> list[R]:
    """`fn` of every item, a bounded number at a time, in order."""
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(item: T) -> R:
        async with gate:
            return await fn(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


@dataclass(frozen=True)
class StuckRun:
    """A live run whose workflow task keeps failing."""

    row: RunRow
    failure: TaskFailure

    def to_json(self, now: datetime) -> dict[str, Any]:
        """The JSON form of `towline runs --stuck --json`."""
        return {**self.row.to_json(now), **self.failure.to_json()}


async def stuck_runs(client: Client, query: str, limit: int) -> list[StuckRun]:
    """Live runs matching `query` whose pending workflow task is past its first attempt.

    Nothing towline does should produce one (deterministic errors fail the run, not
    its task), but user code can: a hook that blocks past the deadlock detector, or a
    deploy whose workflow code no longer matches the histories it replays.
    """
    live = await _executions(client, query, SCAN_LIMIT)

    async def check(execution: WorkflowExecution) -> StuckRun | None:
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            desc = await describe_run(handle)
            failure = await task_failure(client, desc)
        except (CliError, RPCError):
            return None  # closed or gone since it was listed
        if failure is None:
            return None
        row = await RunRow.of(desc, client.data_converter.payload_codec)
        if row.agent is None:  # stuck in its first workflow task: no attribute yet, the input
            row = replace(row, agent=await agent_name(client, desc))
        return StuckRun(row, failure)

    found = [s for s in await _each(live, check) if s is not None]
    return found[:limit]


@dataclass
class PendingScan:
    """Pending approvals across runs, and the waiting runs that did not answer."""

    calls: list[PendingApproval] = field(default_factory=list[PendingApproval])
    remembered: list[tuple[str, dict[str, Any]]] = field(default_factory=list[tuple[str, dict[str, Any]]])
    """(workflow id, remembered decision) of the runs read."""
    unanswered: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    """(workflow id, why) of waiting runs whose `state` query got no answer."""


async def pending_approvals(client: Client, query: str, limit: int) -> PendingScan:
    """Tool calls waiting for approval in the runs `query` lists (waiting ones), oldest first."""
    waiting = await _executions(client, query, SCAN_LIMIT)
    now = datetime.now(UTC)
    queues = sorted({e.task_queue for e in waiting})
    polled = dict(zip(queues, await _each(queues, lambda q: workers_polling(client, q, now)),
                      strict=True))

    async def read(execution: WorkflowExecution) -> tuple[str, StateQueryResult | str]:
        if polled[execution.task_queue] is False:  # a query would only time out
            return (execution.id, f"no worker is polling task queue {execution.task_queue!r}")
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        state = await query_state(handle)
        return (execution.id, state)

    scan = PendingScan()
    for got in await _each(waiting, read):
        run_id, state = got
        if isinstance(state, str):
            scan.unanswered.append((run_id, state))
        else:
            scan.calls.extend(pending_from_state(state))
            scan.remembered.extend((run_id, r) for r in state.remembered)
    scan.calls.sort(key=oldest_first)
    del scan.calls[limit:]
    return scan
