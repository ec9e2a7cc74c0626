"""Reading one run's state for the CLI: what `show`, `pending` and the steering commands need.

Everything here reads; nothing prints (`towline.cli.render` formats). A live run
answers the `state` and `messages` queries (a worker must be polling); a closed run
is read from its result or, when it failed, from the partial run in its failure;
the visibility record and the ledger memo `towline.counters` fill in what no
worker can answer. Whether a workflow *task* keeps failing comes from `describe`
(the pending workflow task's attempt) and the failure recorded in the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.enums.v1 import EventType, TaskQueueType, WorkflowTaskFailedCause
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError, RPCStatusCode

from towline.cli.common import CliError, history_from_end, one_line
from towline.cli.stalled import TaskFailure, waits_on_nothing
from towline.client import RunHandle, run_error
from towline.encryption.codec import ENCODING, KEY_ENV
from towline.messages import MESSAGES, Message, Usage
from towline.replay.records import started_input
from towline.results import (
    Counters,
    HandoffRecord,
    PendingApproval,
    RunResult,
    RunStatus,
    StateQueryResult,
)
from towline.runtime import search_attributes as attribute
from towline.runtime.ledger import MEMO_KEY, decode_counters
from towline.timetravel.lineage import ForkedFrom, lineage_in
from towline.workflows.waiting import DECISIONS_MEMO, WAITING_MEMO

__all__ = [
    "COST_ATTRIBUTE", "QUERY_TIMEOUT", "POLLER_FRESH", "attributes", "status_name",
    "PendingApproval", "pending_from_state", "oldest_first", "TaskFailure", "task_failure",
    "query_state", "describe_run", "memo_counters", "cost_micros", "agent_name",
    "workers_polling", "RunDetails", "read_run", "memo_json",
]

COST_ATTRIBUTE = attribute.COST_MICROS.name
"""Search attribute with a run's spend in millionths of a US dollar (absent when unknown)."""
QUERY_TIMEOUT = timedelta(seconds=5)
"""How long a query may wait for a worker to answer."""
POLLER_FRESH = timedelta(seconds=90)
"""A worker re-polls its task queue at least every ~70 s (the long-poll timeout); a poller
last seen longer ago than this has gone (the server keeps listing it for 5 minutes)."""


def attributes(typed: TypedSearchAttributes) -> dict[str, Any]:
    """Search attribute values by name (registered or not, so newer keys read as they come)."""
    pairs: Sequence[SearchAttributePair[Any]] = typed.search_attributes  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return {pair.key.name: pair.value for pair in pairs}


def status_name(status: WorkflowExecutionStatus | None, towline_status: str | None) -> str:
    """A run's status as towline names it: running/waiting while live, else how it closed."""
    if status is None or status == WorkflowExecutionStatus.RUNNING:
        return RunStatus.WAITING if towline_status == RunStatus.WAITING else RunStatus.RUNNING
    return {
        WorkflowExecutionStatus.COMPLETED: RunStatus.SUCCEEDED,
        WorkflowExecutionStatus.FAILED: RunStatus.FAILED,
        WorkflowExecutionStatus.TERMINATED: "terminated",
        WorkflowExecutionStatus.CANCELED: "cancelled",
        WorkflowExecutionStatus.TIMED_OUT: "timed-out",
        WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued",
    }.get(status, status.name.lower())


def pending_from_state(state: StateQueryResult) -> list[PendingApproval]:
    """The pending calls of a `state` query answer, oldest request first."""
    return sorted(state.pending(), key=oldest_first)


def oldest_first(p: PendingApproval) -> tuple[bool, float]:
    """Sort key: the longest-waiting call first, calls of unknown age last."""
    return (p.requested_at is None, p.requested_at.timestamp() if p.requested_at else 0.0)


async def _last_task_failure(client: Client, workflow_id: str, run_id: str | None) -> tuple[str, str]:
    """The last `WorkflowTaskFailed` event's message and cause, read from the history's end."""
    async for events, _ in history_from_end(client, workflow_id, run_id, 100, 10):
        for event in events:  # the failure is near the end: a huge history is not read whole
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attrs = event.workflow_task_failed_event_attributes
                cause = WorkflowTaskFailedCause.Name(attrs.cause)
                return attrs.failure.message, cause.removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
    return "(no failure recorded in the history)", "UNSPECIFIED"


async def task_failure(client: Client, desc: WorkflowExecutionDescription) -> TaskFailure | None:
    """Why a live run is stuck: its failing workflow task, or (attempt 0) that it waits on nothing."""
    pending = desc.raw_description.pending_workflow_task
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    if pending.attempt <= 1:  # not failing: stuck only if it waits on nothing
        return await waits_on_nothing(client, desc)
    message, cause = await _last_task_failure(client, desc.id, desc.run_id)
    since = pending.original_scheduled_time.ToDatetime(UTC) if pending.HasField(
        "original_scheduled_time") else None
    return TaskFailure(attempt=pending.attempt, since=since, message=message, cause=cause)


async def query_state(handle: WorkflowHandle[Any, Any],
                      timeout: timedelta = QUERY_TIMEOUT) -> StateQueryResult | str:
    """The run's `state` query answer, or why there is none (no worker, a failing replay)."""
    try:
        state = await asyncio.wait_for(RunHandle(handle).state(timeout=timeout),
                                       timeout.total_seconds() + 2)
    except (RPCError, WorkflowQueryFailedError, TimeoutError) as e:
        return f"the state query got no answer ({one_line(e, 200) or 'no worker answered'})"
    return state


async def describe_run(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription:
    """`describe` of an `AgentRun`; `CliError` if there is none by that id."""
    try:
        desc = await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"no workflow {handle.id!r} in this namespace") from None
        raise CliError(f"cannot describe workflow {handle.id!r}: {one_line(e)}") from None
    if desc.workflow_type != "AgentRun":
        raise CliError(f"workflow {handle.id!r} is a {desc.workflow_type}, not an AgentRun")
    return desc


async def agent_name(client: Client, desc: WorkflowExecutionDescription) -> str | None:
    """The run's agent: its search attribute, or the input (a run no worker has started yet)."""
    name = attributes(desc.typed_search_attributes).get(attribute.AGENT.name)
    if isinstance(name, str):
        return name
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=ExecutionRef(workflow_id=desc.id, run_id=desc.run_id), maximum_page_size=1,
    )
    try:
        events = (await client.workflow_service.get_workflow_execution_history(request)).history.events
    except Exception:  # noqa: BLE001 - only a hint: a history we cannot read names no agent
        return None
    agent = (await started_input(client.data_converter, events[0])).get("agent") if events else None
    return agent if isinstance(agent, str) else None


async def workers_polling(client: Client, task_queue: str, now: datetime) -> bool | None:
    """Whether some worker polls `task_queue` now (None when the server cannot tell us)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        response = await client.workflow_service.describe_task_queue(request)
    except RPCError:
        return None
    return any(
        now - p.last_access_time.ToDatetime(UTC) < POLLER_FRESH for p in response.pollers
    )


async def memo_counters(
    execution: WorkflowExecution, codec: PayloadCodec | None, *, strict: bool = False
) -> Counters | None:
    """The ledger memo `towline.counters` of a listed or described run, if readable.

    An encrypted memo is decoded with `codec`; without one it is unreadable, which
    `strict` (one run asked for by id) reports as an error rather than as absent.
    """
    fields = execution.raw_info.memo.fields
    if MEMO_KEY not in fields:
        return None
    payload = fields[MEMO_KEY]
    if payload.metadata.get("encoding") == ENCODING and codec is None:
        if strict:
            raise CliError(f"run {execution.id!r} is encrypted: pass --encrypt, with the key "
                           f"in {KEY_ENV}")
        return None
    try:
        if codec is not None:
            [payload] = await codec.decode([payload])
        return decode_counters(payload)
    except Exception:  # noqa: BLE001 - an unreadable memo is shown as absent, not as a crash
        return None


async def memo_json(execution: WorkflowExecution, key: str) -> Any:
    """A JSON memo value of a listed or described run (None when absent or unreadable)."""
    try:
        return await execution.memo_value(key, None)
    except Exception:  # noqa: BLE001 - an unreadable memo (encrypted, no codec) is shown as absent
        return None


def cost_micros(found: dict[str, Any], counters: Counters | None) -> int | None:
    """Spend in millionths of a US dollar: the ledger's field, else the search attribute.

    The ledger carries it where the namespace could not register the attribute (a dev
    server's SQLite visibility has room for three Int attributes only).
    """
    value = getattr(counters, "cost_micros", None) if counters is not None else None
    if value is None:  # the memo first: exact and live (the attribute is upserted sparsely)
        value = found.get(COST_ATTRIBUTE)
    return value if isinstance(value, int) else None


@dataclass
class RunDetails:
    """Everything `towline show` knows about a run, gathered from wherever it is available."""

    workflow_id: str
    run_id: str
    first_run_id: str | None
    """The run's first execution (before any continue-as-new)."""
    execution_status: str
    """Temporal's status: RUNNING, COMPLETED, FAILED, TERMINATED, ..."""
    status: str
    """towline's: running, waiting, succeeded, failed, terminated, ..."""
    agent: str | None
    task_queue: str
    started: datetime | None
    closed: datetime | None
    cost_micros: int | None = None
    counters: Counters | None = None
    memo: Counters | None = None
    """The visible counters (memo `towline.counters`), which `counters` may be ahead of."""
    usage: Usage | None = None
    messages: list[Message] | None = None
    pending: list[PendingApproval] = field(default_factory=list[PendingApproval])
    approvals: dict[str, Any] = field(default_factory=dict[str, Any])
    """The audit trail (`decisions`, `decisions_total`), `remembered` decisions and `policy`."""
    waiting_for: str | None = None
    """What a waiting run waits for: approval, tool_result or message."""
    failure: tuple[str, str] | None = None
    """(reason, message) of a failed run."""
    output: Any = None
    has_output: bool = False
    stuck: TaskFailure | None = None
    notes: list[str] = field(default_factory=list[str])
    forked_from: ForkedFrom | None = None
    """The run it was forked from (memo `towline.forked_from`), if it is a fork."""
    handoffs: list[HandoffRecord] = field(default_factory=list[HandoffRecord])
    """The run's handoffs (`towline.capabilities.Handoff`): the last one's agent is active."""
    context: dict[str, Any] | None = None
    """The run's context (`RunInput.context`), as its first execution's input gave it."""
    session_end: str | None = None
    """How a completed session ended: `request` or `idle` (`RunResult.session_end`)."""

    def to_json(self, now: datetime) -> dict[str, Any]:
        """The JSON form of `towline show --json`."""
        return {
            "workflow_id": self.workflow_id, "run_id": self.run_id,
            "execution_status": self.execution_status, "status": self.status,
            "agent": self.agent, "task_queue": self.task_queue,
            "started": self.started.isoformat() if self.started else None,
            "closed": self.closed.isoformat() if self.closed else None,
            "cost_micros": self.cost_micros,
            "counters": self.counters.model_dump(mode="json") if self.counters else None,
            "memo_counters": self.memo.model_dump(mode="json") if self.memo else None,
            "usage": self.usage.model_dump(mode="json") if self.usage else None,
            "pending_approvals": [p.to_json(now) for p in self.pending],
            "waiting_for": self.waiting_for,
            "decisions": self.approvals.get("decisions") or [],
            "decisions_total": self.approvals.get("decisions_total") or 0,
            "remembered": self.approvals.get("remembered") or [],
            "policy": self.approvals.get("policy") or {},
            "failure": ({"reason": self.failure[0], "message": self.failure[1]}
                        if self.failure else None),
            "output": self.output,
            "stuck": self.stuck.to_json() if self.stuck else None,
            "messages": (MESSAGES.dump_python(self.messages, mode="json")
                         if self.messages is not None else None),
            "notes": self.notes,
            "forked_from": self.forked_from.model_dump() if self.forked_from else None,
            "handoffs": [h.model_dump(mode="json") for h in self.handoffs],
            "context": self.context,
            "session_end": self.session_end,
        }


async def _read_running(details: RunDetails, handle: WorkflowHandle[Any, Any]) -> None:
    state = await query_state(handle)
    try:
        if isinstance(state, str):
            raise WorkflowQueryFailedError(state)
        details.messages = await RunHandle(handle).messages(timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError):
        details.notes.append("(no worker answered the queries; counters are from the ledger memo)")
        return
    if state.counters is not None:
        details.counters, details.usage = state.counters, state.usage
    details.status = status_name(WorkflowExecutionStatus.RUNNING, state.status)
    details.pending = pending_from_state(state)
    details.waiting_for = state.waiting_for
    details.approvals = state.model_dump(mode="json", include={"decisions", "decisions_total",
                                                               "remembered", "policy"})
    details.handoffs = list(state.handoffs)


async def _read_completed(details: RunDetails, client: Client, desc: WorkflowExecutionDescription) -> None:
    handle = client.get_workflow_handle(desc.id, run_id=desc.run_id, result_type=RunResult)
    result = await handle.result()
    details.counters, details.usage, details.messages = result.counters, result.usage, result.messages
    details.output, details.has_output, details.handoffs = result.output, True, result.handoffs
    details.session_end = result.session_end


async def _read_failed(details: RunDetails, handle: WorkflowHandle[Any, Any]) -> None:
    try:
        await handle.result()
    except WorkflowFailureError as e:
        err = run_error(e)
        details.failure = (err.reason, one_line(err.message))
        if err.partial is not None:
            p = err.partial
            details.counters, details.usage, details.messages = p.counters, p.usage, p.messages
            details.handoffs = p.handoffs


async def read_run(client: Client, workflow_id: str) -> RunDetails:
    """All `towline show` reports about the run `workflow_id` (its latest execution)."""
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    desc = await describe_run(handle)
    found = attributes(desc.typed_search_attributes)
    memo = await memo_counters(desc, client.data_converter.payload_codec, strict=True)
    details = RunDetails(
        workflow_id=desc.id, run_id=desc.run_id,
        first_run_id=desc.raw_description.workflow_execution_info.first_run_id or None,
        execution_status=desc.status.name if desc.status is not None else "UNKNOWN",
        status=status_name(desc.status, found.get(attribute.STATUS.name)),
        agent=found.get(attribute.AGENT.name), task_queue=desc.task_queue,
        started=desc.start_time, closed=desc.close_time,
        counters=memo, memo=memo,
        forked_from=lineage_in(desc.raw_info.memo.fields),
    )
    details.cost_micros = cost_micros(found, details.counters)
    trail = await memo_json(desc, DECISIONS_MEMO)
    if isinstance(trail, dict):  # the audit trail as the history last recorded it
        details.approvals = {"decisions": trail.get("entries") or [],  # pyright: ignore[reportUnknownMemberType]
                             "decisions_total": trail.get("total") or 0}  # pyright: ignore[reportUnknownMemberType]
    waiting = await memo_json(desc, WAITING_MEMO)
    details.waiting_for = waiting if isinstance(waiting, str) else None
    if desc.status == WorkflowExecutionStatus.RUNNING:
        details.stuck = await task_failure(client, desc)
        await _read_running(details, handle)
    elif desc.status == WorkflowExecutionStatus.COMPLETED:
        await _read_completed(details, client, desc)
    elif desc.status == WorkflowExecutionStatus.FAILED:
        await _read_failed(details, handle)
    return details
