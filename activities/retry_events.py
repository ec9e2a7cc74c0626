"""The live event of a retried model request: the attempt after a failed one says, on the run's
stream, why the one before it failed (`retry`, see `towline.events`).

The attempt that failed cannot always say so itself (its worker may be gone: that is what a
heartbeat timeout means), and the workflow hears of an activity's attempts only when the
activity ends. So the next attempt, as it starts, asks Temporal (DescribeWorkflowExecution:
its own pending activity's last failure and worker) and publishes one event: one
signal to the run per retry, nothing for a request that succeeds at once. It never fails the
request: an event that cannot be published is logged and dropped.
"""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.api.enums.v1 import TimeoutType
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from towline.events import EVENTS_TOPIC, EventType

__all__ = ["failure_summary", "publish_retry"]

_TIMEOUTS = {TimeoutType.TIMEOUT_TYPE_HEARTBEAT: "no heartbeat within its heartbeat timeout",
             TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE: "no result within its start-to-close timeout",
             TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START: "no worker started it in time",
             TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE: "its schedule-to-close timeout passed"}
_log = logging.getLogger("towline.retries")


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_summary(failure: Failure) -> tuple[str, str, bool]:
    """A failure Temporal recorded for an activity attempt, as (one line, its type, whether
    the attempt's worker was lost: it timed out)."""
    if failure.HasField("timeout_failure_info"):
        kind = failure.timeout_failure_info.timeout_type
        return _TIMEOUTS.get(kind, _one_line(failure.message, 150)), "timeout", True
    cause = failure
    while cause.HasField("cause") and not cause.HasField("application_failure_info"):
        cause = cause.cause
    kind = cause.application_failure_info.type if cause.HasField("application_failure_info") else ""
    return _one_line(cause.message or failure.message, 200), kind or "failure", False


async def publish_retry(step: int, what: str = "model request") -> None:
    """On an attempt after the first: publish why the attempt before it failed."""
    info = activity.info()
    if info.attempt <= 1 or info.is_local:
        return
    try:
        handle = activity.client().get_workflow_handle(info.workflow_id or "",
                                                       run_id=info.workflow_run_id)
        desc = await handle.describe()
        pending = next((p for p in desc.raw_description.pending_activities
                        if p.activity_id == info.activity_id), None)
        if pending is None or not pending.HasField("last_failure"):
            return
        why, kind, lost = failure_summary(pending.last_failure)
        stream = WorkflowStreamClient.from_within_activity()
        stream.topic(EVENTS_TOPIC).publish({
            "type": EventType.RETRY.value, "step": step, "activity_id": info.activity_id, "what": what,
            "attempt": info.attempt - 1, "failure": why, "failure_type": kind,
            "worker_lost": lost})
        await stream.flush()
    except Exception as e:  # noqa: BLE001 - the request matters, its preview does not
        _log.warning("the retry of step %s was not published: %s", step, e)
