"""How the model activities are scheduled, and what one model call of a run is.

The model request, a background response's poll and its cancel are scheduled the one
way `schedule_model_activity` does it (the model's task queue, the run's priority,
Temporal's retries), and their failures become the run's (`ModelRequestFailed`,
`ContextLengthExceeded`, `PayloadTooLarge`, `Cancelled`).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

from towline.activities.model_errors import CONTEXT_LENGTH
from towline.errors import (
    Cancelled,
    ContextLengthExceeded,
    ModelRequestFailed,
    PayloadTooLarge,
    runtime_failure,
)
from towline.fleet.routing import current_dispatch
from towline.messages import ModelResponse, Usage
from towline.options import BACKGROUND_TIMEOUT

__all__ = ["CallPlan", "ModelCall", "schedule_model_activity", "validated",
           "wait_cancellation_completed"]

_WAIT_ON_CANCEL: ContextVar[bool] = ContextVar("towline_wait_on_cancel", default=False)
"""Set in a task whose model activities, once cancelled, wait for the worker's answer."""


def wait_cancellation_completed() -> None:
    """Model activities scheduled from here on in the calling task, once cancelled, wait until
    the activity's worker answers the cancellation (Temporal's `WAIT_CANCELLATION_COMPLETED`),
    so a response that was already complete still comes back and its usage is counted.

    The task's context is its own (asyncio copies it), so the setting ends with the task:
    a parallel `InputGuardrail` calls it in the task that makes the run's model request.
    """
    _WAIT_ON_CANCEL.set(True)


_TOO_LARGE = ("PayloadTooLarge", "PayloadsTooLarge")
"""Activity failure types of a response over the payload limit: the model activity's
own check, and the SDK's (`PayloadsTooLarge`) should a response slip past it."""


@dataclass(frozen=True)
class CallPlan:
    """What every activity of one model call shares."""

    model: str
    run_step: int
    agent: str
    summary: str
    """The model request's activity summary (`"<model> · step <n>"`)."""
    output_tools: list[str]
    """The names of the output tools offered."""
    timeout: timedelta
    retry_policy: RetryPolicy
    heartbeat_timeout: timedelta | None
    poll_interval: timedelta
    """A background call: the first wait before polling (each later one doubles)."""
    poll_max_interval: timedelta
    """A background call: the longest wait between two polls."""
    max_requests: int | None = None
    """At most this many model requests (a paused turn's continuations count), None: any."""
    background_timeout: timedelta = BACKGROUND_TIMEOUT
    """A background call: how long it may go unfinished before it is cancelled and the run
    fails `BackgroundTimeout` (engine 5; `suspended.MAX_BACKGROUND_POLLS` bounds it too)."""


@dataclass(frozen=True)
class ModelCall:
    """A finished model call: the response, and the model requests it took."""

    response: ModelResponse
    requests: int
    unreported: Usage
    """The usage the caller has not been told of (`answered`): the last request's (a paused
    turn's earlier pieces were counted as they came), or the whole call's."""


async def schedule_model_activity(plan: CallPlan, activity: str, arg: Any, summary: str,
                                  timeout: timedelta | None = None) -> Any:
    """Schedule one of the model activities (the request, a background poll or cancel) the one
    way they all are: the model's task queue and the run's priority, Temporal's retries; its
    failure as the run's. Decoded as plain JSON: the caller validates it (a response that
    does not decode would otherwise fail the workflow *task* and leave the run stuck)."""
    # Fleet: the model's own task queue (a shared rate limit) and the run's priority;
    # both default (the run's queue, no priority) before engine 3 (see `towline.fleet.routing`).
    dispatch = current_dispatch()
    model = plan.model
    try:
        return await workflow.execute_activity(
            activity, arg, cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            if _WAIT_ON_CANCEL.get() else ActivityCancellationType.TRY_CANCEL,
            start_to_close_timeout=timeout or plan.timeout,
            heartbeat_timeout=plan.heartbeat_timeout if timeout is None else None,
            retry_policy=plan.retry_policy, summary=summary,
            task_queue=dispatch.model_queue(model), priority=dispatch.priority,
        )
    except ActivityError as e:
        cause = e.cause or e
        if isinstance(cause, CancelledError):
            raise runtime_failure(Cancelled("the run was cancelled during a model call")) from e
        if isinstance(cause, ApplicationError) and cause.type in _TOO_LARGE:
            raise runtime_failure(PayloadTooLarge(
                f"model {model!r} answered too large a response: {cause}",
                usage=_reported_usage(cause),
            )) from e
        if isinstance(cause, ApplicationError) and cause.type == CONTEXT_LENGTH:
            raise runtime_failure(ContextLengthExceeded(f"model {model!r} failed: {cause}")) from e
        raise runtime_failure(ModelRequestFailed(f"model {model!r} failed: {cause}")) from e


def validated(model: str, raw: Any) -> ModelResponse:
    """A model activity's answer as a `ModelResponse`, or the run fails `ModelRequestFailed`."""
    try:
        return ModelResponse.model_validate(raw)
    except ValidationError as e:
        raise runtime_failure(
            ModelRequestFailed(f"model {model!r} answered an invalid response: {e}")
        ) from None


def _reported_usage(cause: ApplicationError) -> Usage | None:
    """The usage a failed model activity reported in its details (a response too large)."""
    try:
        return Usage.model_validate(cause.details[0]) if cause.details else None
    except (ValidationError, TypeError):
        return None
