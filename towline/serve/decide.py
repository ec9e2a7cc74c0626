"""How `towline serve` decides the calls a run waits for: the REST decision
(`POST /runs/{id}/approvals/{call_id}`), an AG-UI `resume` and front-end tool results, each
sent as the run's own update, so the run's validators refuse what they refuse anywhere else
(a call not waiting, a digest that is not the call's, a decision its rule does not allow,
edited arguments its schema refuses, a return its output type refuses). One that no worker
takes within the wait is pending (the server holds it: a worker that starts applies it) or
not delivered (`towline.review.delivery`): the REST decision answers `202` and `504`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from starlette.responses import JSONResponse
from temporalio.client import (
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.service import RPCError, RPCStatusCode

from towline.client import RunHandle
from towline.errors import RunError
from towline.results import PendingApproval
from towline.serve.waits import ToolFailed
from towline.workflows.decisions import DecisionKind

__all__ = ["UPDATE_WAIT", "MAX_DECISION_BYTES", "DecisionBody", "send_decision", "pending_calls",
           "send_resume", "send_results", "error", "short", "failure_reason", "failure_text", "rpc_refusal",
           "Refusal"]

UPDATE_WAIT: Final = 30.0
"""Seconds to wait for a worker to take a message or a decision (`ServeConfig.update_wait`)."""

MAX_DECISION_BYTES: Final = 1024 * 1024
"""The largest decision body taken (413 over it): its update's argument is recorded whole in the
run's history, and Temporal refuses a payload over 2 MB (failing the workflow task that accepts
it, and aborting the update); half of that leaves room for the rest of the task."""


class DecisionBody(BaseModel):
    """The body of `POST /runs/{id}/approvals/{call_id}`: `{"decision": KIND, ...}` (or the
    short `{"approved": true|false}`)."""

    model_config = ConfigDict(extra="forbid")

    decision: DecisionKind | None = None
    """approve, reject, edit (with `args`) or respond (with `result`)."""
    approved: bool | None = None
    """The short form: approve (true) or reject (false)."""
    reason: str | None = None
    """Recorded with the decision; told to the model on a rejection (unless `message`, or the
    tool's rejection message, is). Longer than the audit trail records
    (`audit_bounds.MAX_REASON_CHARS`): refused, 422."""
    message: str | None = None
    """reject only: the exact text the model is told of the rejection (engine 5), over the
    tool's configured rejection message and `reason` (which stays the audit trail's); as
    bounded as `reason`."""
    digest: str | None = None
    """The digest of the call decided (the `towline.approval` event's): refused if the call
    waiting under that id is another."""
    args: dict[str, Any] | None = None
    """edit: the arguments the call runs with (checked against the tool's schema)."""
    result: Any = None
    """respond: the call's return (checked against the tool's output type); the tool does not
    run. For a front-end tool's call, its result."""
    by: str | None = None
    """Who decided, as the client declares it (the audit trail; `audit_bounds.MAX_BY_CHARS`)."""

    @model_validator(mode="after")
    def _one_kind(self) -> DecisionBody:
        if (self.decision is None) == (self.approved is None):
            raise ValueError('give "decision" (approve, reject, edit, respond) or "approved"')
        if self.kind == "edit" and self.args is None:
            raise ValueError('an edit needs "args": the arguments the call runs with')
        if self.kind == "respond" and "result" not in self.model_fields_set:
            raise ValueError('a respond needs "result": the call\'s return')
        if self.message is not None and self.kind != "reject":
            raise ValueError(f'"message" is what the model is told of a rejection: a {self.kind} '
                             "has none")
        from towline.workflows.audit_bounds import refusal

        refused = refusal(self.kind, reason=self.reason, message=self.message,  # the run's limits
                          by=self.by)
        if refused is not None:
            raise ValueError(refused)
        return self

    @property
    def kind(self) -> DecisionKind:
        """The decision's kind."""
        if self.decision is not None:
            return self.decision
        return "approve" if self.approved else "reject"


async def send_decision(handle: WorkflowHandle[Any, Any], call_id: str, body: DecisionBody,
                        wait: float = UPDATE_WAIT) -> str:
    """Send the decision's update and wait for it (`WorkflowUpdateFailedError`: refused;
    `DecisionPending` / `DecisionNotDelivered`: no worker took it within `wait` seconds)."""
    from towline.workflows import ApprovalDecision, EditDecision, RespondDecision

    run = RunHandle(handle)
    common: dict[str, Any] = {"call_id": call_id, "reason": body.reason, "digest": body.digest,
                              "by": body.by, "message": body.message}
    if body.kind == "edit":
        return await run.edit(EditDecision(**common, args=dict(body.args or {})), wait=wait)
    if body.kind == "respond":
        return await run.respond(RespondDecision(**common, result=body.result), wait=wait)
    if body.kind == "reject":
        return await run.reject(ApprovalDecision(**common), wait=wait)
    return await run.approve(ApprovalDecision(**common), wait=wait)


async def pending_calls(handle: WorkflowHandle[Any, Any]) -> list[PendingApproval]:
    """The calls the run waits for now (its `state` query)."""
    return await asyncio.wait_for(RunHandle(handle).pending(), UPDATE_WAIT)


async def send_resume(handle: WorkflowHandle[Any, Any], decisions: Sequence[dict[str, Any]],
                      by: str | None = None, wait: float = UPDATE_WAIT) -> None:
    """An AG-UI resume's decisions, as one `decide` update (all applied, or none)."""
    from towline.workflows import Decisions

    batch = Decisions.model_validate({"decisions": list(decisions), "by": by})
    await RunHandle(handle).decide(batch, wait=wait)


async def send_results(handle: WorkflowHandle[Any, Any], results: Sequence[tuple[str, Any]],
                       wait: float = UPDATE_WAIT) -> None:
    """Front-end tool results, each through the `tool_result` update (bound to the digest of
    the call pending under its id)."""
    from towline.workflows import ToolResultInput

    digests = {c.call_id: c.digest for c in await pending_calls(handle) if c.kind == "client"}
    for call_id, result in results:
        arg = (ToolResultInput(call_id=call_id, error=result.error, digest=digests.get(call_id))
               if isinstance(result, ToolFailed) else
               ToolResultInput(call_id=call_id, result=result, digest=digests.get(call_id)))
        await RunHandle(handle).tool_result(arg, wait=wait)


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


class Refusal(Exception):
    """An error of the server's own whose text is written for the client (`failure_reason`
    passes it on)."""


def failure_reason(e: BaseException) -> str:
    """What a failed update (or another error) says to the client: a Temporal failure's
    message (the run's or the update's own words) or a `Refusal`'s; of any other exception
    only its kind. A library's raw text (a file it read, a URL, a stack) is for the server's
    log, never for a (web) client."""
    cause = e.cause if isinstance(e, WorkflowUpdateFailedError) else e
    if isinstance(cause, FailureError):
        return failure_text(cause.type if isinstance(cause, ApplicationError) else None,
                            cause.message)
    if isinstance(cause, RunError):  # a run that ended (`RunEnded`): its reason and message
        return failure_text(cause.reason, cause.message)
    if isinstance(cause, Refusal):
        return str(cause)
    logging.getLogger(__name__).warning("a client is told only the kind of %s: %s",
                                        type(cause or e).__name__, cause or e)
    return f"the server could not go on with the run ({type(cause or e).__name__}: see its log)"


def failure_text(reason: Any, message: Any) -> str:
    """A run's failure (its `reason`, `message`) in words for the client: its message, but not
    an `InternalError`'s (a bug's raw exception text, which may quote what the worker read):
    the run's history keeps that one for the operator."""
    if reason == "InternalError":
        return "the run failed on an internal error (the run's history records it)"
    return str(message or "the run failed")


def rpc_refusal(e: RPCError) -> tuple[int, str]:
    """The answer to a decision the Temporal service did not take (never a 500, never its raw
    text): 422 for one it refused as sent (`INVALID_ARGUMENT`, e.g. over its payload limit),
    503 otherwise (unavailable, overloaded, the update aborted): the client may try again."""
    if e.status in (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.OUT_OF_RANGE):
        return 422, "the Temporal service refused the decision as sent (too large, or malformed)"
    return 503, ("the Temporal service could not take the decision now (unavailable, overloaded, "
                 "or the update was aborted): try again")


TIMEOUTS = (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError)
"""What a wait for a worker raises when none answered in time."""
