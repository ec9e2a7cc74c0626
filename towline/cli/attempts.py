"""A run's failed activity attempts, as Temporal records them: what `towline run` and `towline
watch` say while Temporal retries a model request or a tool call, and `towline show` lists.

Nothing here is the workflow's: a live run's retries are its pending activities
(DescribeWorkflowExecution: each one's attempt, the last attempt's failure, when the next
one starts, the worker that ran it), and a run's past ones are in its history (an activity's
ActivityTaskStarted event carries the failure of the attempt before it; ActivityTaskFailed
and ActivityTaskTimedOut the last attempt's). A timeout (no heartbeat, or no result within
the start-to-close timeout) means the worker running the attempt was lost: Temporal gives the
next attempt to any worker polling the queue. Which step an activity belongs to comes from its
summary (`<model> · step N`; a tool's is `name(args)`, the step of the model request before it).
Whether a tool is idempotent comes from its input (`ToolActivityInput.idempotent`): a lost
attempt of a non-idempotent tool is not simply "retried elsewhere" (the next attempt runs the
tool only if the lost one had not entered it), and its line says so.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from towline.activities.io import MODEL_ACTIVITY
from towline.activities.retry_events import failure_summary
from towline.replay.history_reader import TOOL_ACTIVITY_PREFIX

__all__ = ["ATTEMPT_FAILED", "FailedAttempt", "history_attempts", "pending_attempts", "run_attempts", "watch_attempts"]

ATTEMPT_FAILED = "attempt_failed"
"""The type of the line `towline watch --json` prints for a failed attempt (offset -1: it is
read from Temporal's pending activities, not from the run's stream)."""

_STEP = re.compile(r" · step (\d+)")


@dataclass(frozen=True)
class FailedAttempt:
    """One failed attempt of one of the run's activities."""

    activity_id: str
    """The activity's id in its workflow execution."""
    what: str
    """`model request`, `tool NAME`, or the activity type."""
    step: int | None
    """The run step it belongs to (None: not known)."""
    attempt: int
    """The attempt that failed, from 1."""
    failure: str
    """Why, on one line (a timeout: what timed out)."""
    failure_type: str
    """The failure's type: an `ApplicationError`'s (`HTTP500`), `timeout`, or `failure`."""
    worker_lost: bool
    """It timed out: the worker running it died or was cut off (another one retries it)."""
    retried: bool
    """Another attempt follows (False: the activity's last attempt failed)."""
    retry_at: datetime | None = None
    """A live run's activity waiting to retry: when the next attempt starts."""
    worker: str | None = None
    """The identity of the worker that ran it, when Temporal says (a live run's: while its
    retry waits; once the next attempt runs, Temporal names that one's worker)."""
    once: bool = False
    """A call of a non-idempotent tool: a later attempt runs the tool only if this one had not
    entered it (its entry mark says); if it had, the call ends `unknown`, not run again."""

    def line(self, now: datetime | None = None) -> str:
        """What `towline run` and `towline watch` print for it."""
        where = f"[step {self.step}] " if self.step is not None else ""
        noun = "the request" if self.what == "model request" else f"{self.what}"
        if self.worker_lost:
            on = f", worker {self.worker}" if self.worker else ""
            if self.once:
                return (f"{where}worker lost; {noun} is not idempotent: another worker runs it "
                        "only if the lost attempt had not entered it, else the call ends unknown "
                        f"and is not run again ({self.what} attempt {self.attempt}: "
                        f"{self.failure}{on})")
            return (f"{where}worker lost; {noun} is retried elsewhere ({self.what} attempt "
                    f"{self.attempt}: {self.failure}{on})")
        return f"{where}{self.what} attempt {self.attempt} failed: {self.failure}; {self._next(now)}"

    def entry(self) -> str:
        """What `towline show` lists for it."""
        where = f"[step {self.step}] " if self.step is not None else ""
        lost = "worker lost: " if self.worker_lost else ""
        then = ("retry pending" if self.retry_at is not None else "retried") if self.retried \
            else "its last attempt"
        if self.retried and self.once and self.worker_lost:
            then = ("a later attempt checks its entry mark" if self.retry_at is not None else
                    "a later attempt checked its entry mark: it runs a tool not yet entered, "
                    "never one entered before")
        on = f", worker {self.worker}" if self.worker else ""
        return f"{where}{self.what} attempt {self.attempt} failed: {lost}{self.failure} ({then}{on})"

    def _next(self, now: datetime | None) -> str:
        if not self.retried:
            return "no attempts left"
        if self.retry_at is None:
            return "retrying now"
        wait = (self.retry_at - (now or datetime.now(UTC))).total_seconds()
        if wait < 0.05:
            return "retrying now"
        return f"retrying in {wait:.1f} s" if wait < 9.95 else f"retrying in {wait:.0f} s"

    @classmethod
    def of_event(cls, e: Any) -> FailedAttempt:
        """The attempt a `retry` event (`towline.events.RunEvent`) tells of."""
        return cls(str(e.field("activity_id")), str(e.field("what") or "model request"), e.step,
                   int(e.field("attempt") or 0), str(e.field("failure")),
                   str(e.field("failure_type")), bool(e.field("worker_lost")), retried=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON form `towline show --json` lists."""
        return {"activity_id": self.activity_id, "what": self.what, "step": self.step,
                "attempt": self.attempt, "failure": self.failure,
                "failure_type": self.failure_type, "worker_lost": self.worker_lost,
                "retried": self.retried,
                "retry_at": self.retry_at.isoformat() if self.retry_at else None,
                "worker": self.worker, "idempotent": not self.once}


@dataclass(frozen=True)
class _Scheduled:
    what: str
    step: int | None
    tool_input: Payload | None = None
    """A tool call's input, decoded (`_once`) only for a call with a failed attempt."""


async def _summary(client: Client, event: HistoryEvent) -> str:
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return ""
    try:
        [value] = await client.data_converter.decode([event.user_metadata.summary], [str])
    except Exception:  # noqa: BLE001 - an unreadable summary (a codec missing) only costs the step
        return ""
    return value if isinstance(value, str) else ""


async def _scheduled(client: Client, events: Iterable[HistoryEvent]) -> dict[int, tuple[str, _Scheduled]]:
    """Each scheduled activity by its event id: its activity id, what it is and its step."""
    found: dict[int, tuple[str, _Scheduled]] = {}
    step: int | None = None
    for e in events:
        if not e.HasField("activity_task_scheduled_event_attributes"):
            continue
        attrs = e.activity_task_scheduled_event_attributes
        summary = await _summary(client, e)
        if attrs.activity_type.name == MODEL_ACTIVITY:
            match = _STEP.search(summary)
            step = int(match.group(1)) if match else step
            what = "model request"
        elif "(" in summary:
            what = f"tool {summary.split('(', 1)[0]}"
        else:
            what = attrs.activity_type.name
        payloads = attrs.input.payloads
        tool = attrs.activity_type.name.startswith(TOOL_ACTIVITY_PREFIX) and bool(payloads)
        found[e.event_id] = (attrs.activity_id, _Scheduled(what, step, payloads[0] if tool else None))
    return found


async def _once(client: Client, known: _Scheduled) -> bool:
    """Whether `known` is a call of a non-idempotent tool (`FailedAttempt.once`): its input
    does not declare the tool idempotent (an unreadable input counts as idempotent: the plain
    "retried elsewhere" is then told, as before)."""
    if known.tool_input is None:
        return False
    try:
        [value] = await client.data_converter.decode([known.tool_input], [dict[str, Any]])
    except Exception:  # noqa: BLE001 - an unreadable input (a codec missing) only costs the wording
        return False
    return isinstance(value, dict) and value.get("idempotent") is not True  # pyright: ignore[reportUnknownMemberType]


async def history_attempts(client: Client, events: list[HistoryEvent]) -> list[FailedAttempt]:
    """The failed attempts one execution's history records, in order (only the last failure
    before each attempt is recorded: a `retried` attempt's earlier ones are not)."""
    scheduled = await _scheduled(client, events)
    started: dict[int, tuple[int, str]] = {}
    found: list[FailedAttempt] = []
    for e in events:
        if e.HasField("activity_task_started_event_attributes"):
            attrs = e.activity_task_started_event_attributes
            started[e.event_id] = (attrs.attempt, attrs.identity)
            known = scheduled.get(attrs.scheduled_event_id)
            if known is None or attrs.attempt <= 1 or not attrs.HasField("last_failure"):
                continue
            why, kind, lost = failure_summary(attrs.last_failure)
            found.append(FailedAttempt(known[0], known[1].what, known[1].step, attrs.attempt - 1,
                                       why, kind, lost, retried=True,
                                       once=await _once(client, known[1])))
            continue
        if e.HasField("activity_task_failed_event_attributes"):
            ended: Any = e.activity_task_failed_event_attributes
        elif e.HasField("activity_task_timed_out_event_attributes"):
            ended = e.activity_task_timed_out_event_attributes
        else:
            continue
        known = scheduled.get(ended.scheduled_event_id)
        if known is None:
            continue
        attempt, identity = started.get(ended.started_event_id, (1, ""))
        why, kind, lost = failure_summary(ended.failure)
        found.append(FailedAttempt(known[0], known[1].what, known[1].step, attempt, why, kind,
                                   lost, retried=False, worker=identity or None,
                                   once=await _once(client, known[1])))
    return found


async def run_attempts(client: Client, workflow_id: str,
                       histories: Iterable[Any]) -> list[FailedAttempt]:
    """The failed attempts of every execution in `histories` (`WorkflowHistory`s), then those
    of the live run's pending activities."""
    found: list[FailedAttempt] = []
    for history in histories:
        found.extend(await history_attempts(client, list(history.events)))
    return found + await pending_attempts(client, workflow_id)


async def pending_attempts(client: Client, workflow_id: str,
                           index: dict[str, _Scheduled] | None = None) -> list[FailedAttempt]:
    """The last failed attempt of each of a live run's pending activities that failed before
    (`index`: what each activity id is, filled from the history as needed). Empty when the
    run is not running or cannot be described."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        desc = await handle.describe()
    except RPCError:
        return []
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return []
    index = {} if index is None else index
    found: list[FailedAttempt] = []
    for p in desc.raw_description.pending_activities:
        if p.attempt <= 1 or not p.HasField("last_failure"):
            continue
        if p.activity_id not in index:
            history = await handle.fetch_history()
            index.update(dict((await _scheduled(client, history.events)).values()))
        known = index.get(p.activity_id, _Scheduled(p.activity_type.name, None))
        why, kind, lost = failure_summary(p.last_failure)
        waiting = p.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        retry_at = (p.next_attempt_schedule_time.ToDatetime(UTC)
                    if waiting and p.HasField("next_attempt_schedule_time") else None)
        found.append(FailedAttempt(p.activity_id, known.what, known.step, p.attempt - 1, why,
                                   kind, lost, retried=True, retry_at=retry_at,
                                   worker=(p.last_worker_identity or None) if waiting else None,
                                   once=await _once(client, known)))
    return found


ATTEMPT_POLL = 0.5
"""Seconds between two looks at a live run's pending activities."""


async def watch_attempts(client: Client, workflow_id: str,
                         on_attempt: Callable[[FailedAttempt], None] | None) -> None:
    """Tell `on_attempt` of each failed attempt of the run's activities, until cancelled
    (None: return at once)."""
    if on_attempt is None:
        return
    told: set[tuple[str, int]] = set()
    index: dict[str, _Scheduled] = {}
    while True:
        for a in await pending_attempts(client, workflow_id, index):
            if (a.activity_id, a.attempt) not in told:
                told.add((a.activity_id, a.attempt))
                on_attempt(a)
        await asyncio.sleep(ATTEMPT_POLL)
