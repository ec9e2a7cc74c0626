"""A live run that waits on nothing: running, with no task, activity, child or timer pending.

Such a run never moves again, and no workflow task fails to say so: its last workflow task
completed without scheduling anything, while the run was not waiting for a person (its
status is not `waiting`). User code gets a run there (a hook awaiting a future nothing will
resolve); `towline runs --stuck` and `towline show` list it with this reason.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus

__all__ = ["NOTHING_PENDING", "waits_on_nothing"]

NOTHING_PENDING = "NOTHING_PENDING"
"""The cause `towline runs --stuck` gives such a run."""

_PAGES = 5
"""History pages (of 100 events, newest first) read for an open timer; past them, not listed."""

_CLOSING = {EventType.EVENT_TYPE_TIMER_FIRED, EventType.EVENT_TYPE_TIMER_CANCELED}


async def waits_on_nothing(
    client: Client, desc: WorkflowExecutionDescription, status: object
) -> tuple[datetime | None, str] | None:
    """(since when, why) if the run waits on nothing; None if it waits on something.

    `status` is the run's `TowlineStatus` attribute (`waiting` runs wait for a person).
    """
    raw = desc.raw_description
    if (desc.status != WorkflowExecutionStatus.RUNNING or status != "running"
            or raw.HasField("pending_workflow_task") or raw.pending_activities
            or raw.pending_children or raw.pending_nexus_operations):
        return None
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=ExecutionRef(workflow_id=desc.id, run_id=desc.run_id or ""),
        maximum_page_size=100,
    )
    closed: set[int] = set()
    since: datetime | None = None
    for _ in range(_PAGES):
        response = await client.workflow_service.get_workflow_execution_history_reverse(request)
        for event in response.history.events:
            if since is None:
                since = event.event_time.ToDatetime(UTC)
            if event.event_type in _CLOSING:
                attrs = (event.timer_fired_event_attributes
                         if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED
                         else event.timer_canceled_event_attributes)
                closed.add(attrs.started_event_id)
            elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
                if event.event_id not in closed:
                    return None  # a durable timer will wake it
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                return since, _WHY
        if not response.next_page_token:
            return since, _WHY
        request.next_page_token = response.next_page_token
    return None


_WHY = ("the run is running but waits on nothing: no workflow task, activity, child workflow "
        "or timer is pending and it is not waiting for a person, so it will not move again "
        "(its last workflow task ended without a command: user code that awaits what nothing "
        "resolves). Fix the code and terminate or reset the run")
