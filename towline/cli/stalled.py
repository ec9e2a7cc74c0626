"""Why a live run is stuck (`TaskFailure`): a workflow task that keeps failing, or waiting on
nothing: running, with no task, activity, child or timer pending.

Such a run never moves again, and no workflow task fails to say so: its last workflow task
completed without scheduling anything, while the run was not waiting for a person (its
status is not `waiting`). User code gets a run there (a hook awaiting a future nothing will
resolve); `towline runs --stuck` and `towline show` list it with this reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus

from towline.cli.common import history_from_end
from towline.results import RunStatus
from towline.runtime.search_attributes import STATUS

__all__ = ["NOTHING_PENDING", "TaskFailure", "waits_on_nothing"]

NOTHING_PENDING = "NOTHING_PENDING"
"""The cause `towline runs --stuck` gives such a run."""

@dataclass(frozen=True)
class TaskFailure:
    """A workflow task that keeps failing: the run cannot make progress (it is stuck)."""

    attempt: int
    """The attempt the pending workflow task is at (> 1); 0: no task is pending."""
    since: datetime | None
    """When the first failing attempt was scheduled."""
    message: str
    """The failure the history recorded (later attempts' failures are not recorded)."""
    cause: str
    """Temporal's cause, e.g. `WORKFLOW_WORKER_UNHANDLED_FAILURE`, `NON_DETERMINISTIC_ERROR`."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form of `--json` output."""
        return {"attempt": self.attempt, "since": self.since.isoformat() if self.since else None,
                "failure": self.message, "cause": self.cause}


_PAGES = 5
"""History pages (of 100 events, newest first) read for an open timer; past them, not listed."""

_CLOSING = {EventType.EVENT_TYPE_TIMER_FIRED, EventType.EVENT_TYPE_TIMER_CANCELED}

_MOVING = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED, EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}
"""A workflow task newer than the last completed one: it is on its way, or failed and is
retried (the description, read a moment before the history, may not show it yet)."""


async def waits_on_nothing(
    client: Client, desc: WorkflowExecutionDescription
) -> TaskFailure | None:
    """Why the run is stuck (attempt 0: no task pending) if it waits on nothing; None if it
    waits on something (runs whose `TowlineStatus` is `waiting` wait for a person)."""
    status = desc.typed_search_attributes.get(STATUS)
    raw = desc.raw_description
    if (desc.status != WorkflowExecutionStatus.RUNNING or status != RunStatus.RUNNING
            or raw.HasField("pending_workflow_task") or raw.pending_activities
            or raw.pending_children or raw.pending_nexus_operations):
        return None
    length = raw.workflow_execution_info.history_length
    closed: set[int] = set()
    since: datetime | None = None
    settled = False  # the last workflow task completed (met, newest first)
    async for events, last in history_from_end(client, desc.id, desc.run_id, 100, _PAGES):
        for event in events:
            if since is None:
                if event.event_id != length:  # the run moved since it was described
                    return None
                since = event.event_time.ToDatetime(UTC)
            if not settled:
                if event.event_type in _MOVING:
                    return None
                settled = event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            if event.event_type in _CLOSING:
                attrs = (event.timer_fired_event_attributes
                         if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED
                         else event.timer_canceled_event_attributes)
                closed.add(attrs.started_event_id)
            elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
                if event.event_id not in closed:
                    return None  # a durable timer will wake it
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                return TaskFailure(0, since, _WHY, NOTHING_PENDING)
        if last:
            return TaskFailure(0, since, _WHY, NOTHING_PENDING)
    return None


_WHY = ("the run is running but waits on nothing: no workflow task, activity, child workflow "
        "or timer is pending and it is not waiting for a person, so it will not move again "
        "(its last workflow task ended without a command: user code that awaits what nothing "
        "resolves). Fix the code and terminate or reset the run")
