"""Delivering an update to a live run (a decision, a session's message, a policy change), and
saying exactly what became of it when no worker takes it within the wait.

Temporal first *admits* an update (the server holds it), then a worker *accepts* it (from then
on it is in the run's history, and it is applied even across crashes). An update admitted but
not yet accepted is held in the server's memory only: a worker that starts later is handed it
and applies it (or the run's validator refuses it then, as it would have at once), but a
restart of the Temporal server before that loses it (no history event records it until it is
accepted: Temporal's `docs/architecture/workflow-update.md`, "Updates in the admitted state
don't have any events, they are lost when the Registry is cleared"; tested against the dev
server in `tests/test_i40_decision_delivery.py`). So a wait that ends with no worker has two
outcomes, told apart by asking the server for the update by its id: `DecisionPending` (the
server holds it) or `DecisionNotDelivered` (it does not: it never arrived, so nothing will
apply it). Neither is a failure of the decision, and neither may be reported as one: a
decision reported as failed and applied later is an approval the operator did not know was
given.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, Final, Protocol, TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage as Stage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from towline.errors import DecisionNotApplied, DecisionNotDelivered, DecisionPending

__all__ = ["ACCEPT_WAIT", "deliver", "update_name", "update_stage"]

R = TypeVar("R")

ACCEPT_WAIT: Final = 30.0
"""Default seconds to wait for a worker to take an update."""

_PROBE: Final = timedelta(seconds=3)
"""How long asking the server about an update may take (it answers at once: no worker is
involved)."""


def _client(handle: WorkflowHandle[Any, Any]) -> Client:
    return handle._client  # pyright: ignore[reportPrivateUsage]


async def update_stage(handle: WorkflowHandle[Any, Any], update_id: str) -> int | None:
    """The stage the server knows update `update_id` of the run at (an
    `UpdateWorkflowExecutionLifecycleStage`: admitted, accepted, completed), or None when it
    does not hold it (it never arrived, or the run refused it)."""
    client = _client(handle)
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace, identity=client.identity,
        update_ref=UpdateRef(workflow_execution=WorkflowExecution(workflow_id=handle.id),
                             update_id=update_id),
        # the lowest stage: the server answers at once with the stage the update is at
        wait_policy=WaitPolicy(lifecycle_stage=Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED))
    try:
        response = await client.workflow_service.poll_workflow_execution_update(
            request, timeout=_PROBE)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return int(response.stage)


class _StartUpdate(Protocol[R]):
    """`WorkflowHandle.start_update` as called here: one argument, by reference. The SDK's
    overloads include a many-argument form whose `args` pyright cannot type (Unknown), which
    would make every use of the method partially unknown."""

    def __call__(self, update: UpdateMethodMultiParam[[Any, Any], R], arg: Any, /, *, id: str,
                 wait_for_stage: WorkflowUpdateStage) -> Awaitable[WorkflowUpdateHandle[R]]: ...


def update_name(update: UpdateMethodMultiParam[..., Any]) -> str:
    """The name a run knows update `update` (a method of `AgentRun`) by."""
    return str(getattr(update, "__name__", update))


async def deliver(handle: WorkflowHandle[Any, Any],
                  update: UpdateMethodMultiParam[[Any, Any], R], arg: Any,
                  wait: float | None = ACCEPT_WAIT, *,
                  waited: float | None = None) -> WorkflowUpdateHandle[R]:
    """Start `update` (a method of `AgentRun`, e.g. `AgentRun.decide`) of the run and wait up to `wait` seconds (None: for as long as it
    takes) for a worker to take it; its handle once taken (its `result()` raises
    `WorkflowUpdateFailedError` if the run refused it). `waited`: the wait to name in what it
    raises, when `wait` is what is left of a longer one (a command's `--wait`).

    `DecisionPending` when no worker took it in time but the server holds it;
    `DecisionNotDelivered` when the server does not hold it either; `DecisionNotApplied` when
    the server could not be asked. `RPCError` (NOT_FOUND) when the run has ended.
    """
    name = update_name(update)
    update_id = f"{name}-{uuid.uuid4()}"
    try:
        start: _StartUpdate[R] = getattr(handle, "start_update")  # noqa: B009 - seen as typed
        return await asyncio.wait_for(start(
            update, arg, id=update_id, wait_for_stage=WorkflowUpdateStage.ACCEPTED), wait)
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        if wait is None:  # not our wait that ended: the call was cancelled
            raise
    said = waited if waited is not None else wait
    try:
        stage = await update_stage(handle, update_id)
    except RPCError as e:  # the server did not say: neither outcome may be claimed
        raise DecisionNotApplied(
            f"{name} not confirmed: no worker took it within {said:g}s, and asking the Temporal "
            f"server whether it holds it failed ({e.message}); it may still be applied",
            name, handle.id, said) from None
    if stage is None:
        raise DecisionNotDelivered(name, handle.id, said)
    if stage >= Stage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED:  # taken as the wait ended
        return handle.get_update_handle(update_id)
    raise DecisionPending(name, handle.id, said, update_id)
