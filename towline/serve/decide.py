"""How `towline serve` decides the calls a run waits for: the REST decision
(`POST /runs/{id}/approvals/{call_id}`), an AG-UI `resume` and front-end tool results, each
sent as the run's own update, so the run's validators refuse what they refuse anywhere else
(a call not waiting, a digest that is not the call's, a decision its rule does not allow,
edited arguments its schema refuses, a return its output type refuses).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from starlette.responses import JSONResponse
from temporalio.client import (
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import FailureError

from towline.review import PendingCall, calls_in_state

__all__ = ["UPDATE_WAIT", "DecisionBody", "decision_update", "send_decision", "pending_calls",
           "send_resume", "send_results", "error", "short", "failure_reason"]

UPDATE_WAIT: Final = 30.0
"""Seconds to wait for a worker to accept a message or apply a decision."""

Kind = Literal["approve", "reject", "edit", "respond"]


class DecisionBody(BaseModel):
    """The body of `POST /runs/{id}/approvals/{call_id}`: `{"decision": KIND, ...}` (or the
    short `{"approved": true|false}`)."""

    model_config = ConfigDict(extra="forbid")

    decision: Kind | None = None
    """approve, reject, edit (with `args`) or respond (with `result`)."""
    approved: bool | None = None
    """The short form: approve (true) or reject (false)."""
    reason: str | None = None
    """Recorded with the decision; told to the model on a rejection."""
    digest: str | None = None
    """The digest of the call decided (the `towline.approval` event's): refused if the call
    waiting under that id is another."""
    args: dict[str, Any] | None = None
    """edit: the arguments the call runs with (checked against the tool's schema)."""
    result: Any = None
    """respond: the call's return (checked against the tool's output type); the tool does not
    run. For a front-end tool's call, its result."""
    by: str | None = None
    """Who decided (the audit trail)."""

    @model_validator(mode="after")
    def _one_kind(self) -> DecisionBody:
        if (self.decision is None) == (self.approved is None):
            raise ValueError('give "decision" (approve, reject, edit, respond) or "approved"')
        if self.kind == "edit" and self.args is None:
            raise ValueError('an edit needs "args": the arguments the call runs with')
        if self.kind == "respond" and "result" not in self.model_fields_set:
            raise ValueError('a respond needs "result": the call\'s return')
        return self

    @property
    def kind(self) -> Kind:
        """The decision's kind."""
        if self.decision is not None:
            return self.decision
        return "approve" if self.approved else "reject"


def decision_update(call_id: str, body: DecisionBody) -> tuple[str, Any]:
    """The update (its name and argument) that makes `body`'s decision about `call_id`."""
    from towline.workflows import ApprovalDecision, EditDecision, RespondDecision

    common: dict[str, Any] = {"call_id": call_id, "reason": body.reason, "digest": body.digest,
                              "by": body.by}
    if body.kind == "edit":
        return "edit", EditDecision(**common, args=dict(body.args or {}))
    if body.kind == "respond":
        return "respond", RespondDecision(**common, result=body.result)
    return body.kind, ApprovalDecision(**common)


async def send_decision(handle: WorkflowHandle[Any, Any], call_id: str,
                        body: DecisionBody) -> str:
    """Send the decision's update and wait for it (`WorkflowUpdateFailedError`: refused)."""
    name, arg = decision_update(call_id, body)
    done: str = await asyncio.wait_for(handle.execute_update(name, arg), UPDATE_WAIT)  # pyright: ignore[reportUnknownMemberType]
    return done


async def pending_calls(handle: WorkflowHandle[Any, Any]) -> list[PendingCall]:
    """The calls the run waits for now (its `state` query)."""
    state: dict[str, Any] = await asyncio.wait_for(handle.query("state"), UPDATE_WAIT)
    return calls_in_state(handle.id, state)


async def send_resume(handle: WorkflowHandle[Any, Any], decisions: Sequence[dict[str, Any]],
                      by: str | None = None) -> None:
    """An AG-UI resume's decisions, as one `decide` update (all applied, or none)."""
    from towline.workflows import Decisions

    batch = Decisions.model_validate({"decisions": list(decisions), "by": by})
    await asyncio.wait_for(handle.execute_update("decide", batch), UPDATE_WAIT)  # pyright: ignore[reportUnknownMemberType]


async def send_results(handle: WorkflowHandle[Any, Any], results: Sequence[tuple[str, Any]]) -> None:
    """Front-end tool results, each through the `tool_result` update (bound to the digest of
    the call pending under its id)."""
    from towline.workflows import ToolResultInput

    digests = {c.call_id: c.digest for c in await pending_calls(handle) if c.kind == "client"}
    for call_id, result in results:
        arg = ToolResultInput(call_id=call_id, result=result, digest=digests.get(call_id))
        await asyncio.wait_for(handle.execute_update("tool_result", arg), UPDATE_WAIT)  # pyright: ignore[reportUnknownMemberType]


def error(status: int, message: str) -> JSONResponse:
    """A JSON error answer: `{"error": message}`."""
    return JSONResponse({"error": message}, status_code=status)


def short(e: BaseException) -> str:
    """A validation error's first problem (where: what), or the error's first line."""
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def failure_reason(e: BaseException) -> str:
    """What a failed update (or another error) says."""
    cause = e.cause if isinstance(e, WorkflowUpdateFailedError) else e
    return cause.message if isinstance(cause, FailureError) else str(cause or e)


TIMEOUTS = (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError)
"""What a wait for a worker raises when none answered in time."""
