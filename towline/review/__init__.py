"""Deciding, from Python, the calls of a live run that wait for a person or a client.

Every helper reads the run's `state` query first, so each decision names the call by id and
by the digest of the call it was made for (a call that changed since is refused by the run),
and takes the call in any short form a person types (`pick`). They send the run's updates
(`decide`, `tool_result`, `set_policy`), so a worker must be polling the run's task queue:
each waits `wait` seconds (30 by default) for one to take the decision, then raises
`DecisionPending` (the server holds it: a worker that starts will apply it) or
`DecisionNotDelivered` (nothing will apply it), never a failure (`towline.review.delivery`).

    from towline.review import approve, edit, pending, respond

    calls = await pending(handle)             # what waits, with digests and indexes
    await approve(handle)                     # the one call waiting
    await edit(handle, "2", {"amount": 5})    # the call shown as #2, with other arguments
    await respond(handle, "call_ab", "no")    # a prefix of its id; the tool does not run
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from towline.errors import DecisionNotDelivered
from towline.results import PendingApproval
from towline.review.delivery import ACCEPT_WAIT

if TYPE_CHECKING:
    from towline.capabilities.approval_rules import DecisionKind
    from towline.client import RunHandle

__all__ = ["PendingApproval", "pending", "pick", "decide", "approve", "reject", "edit", "respond",
           "approve_all", "reject_all", "set_policy", "tool_result", "CallNotFound"]

Scope = Literal["run", "session"]


class CallNotFound(ValueError):
    """No pending call answers to the reference given (or more than one does)."""


def _handle(handle: WorkflowHandle[Any, Any]) -> RunHandle:
    from towline.client import RunHandle  # the client imports `towline.review.delivery`

    return RunHandle(handle)


async def pending(handle: WorkflowHandle[Any, Any], *,
                  wait: float | None = None) -> list[PendingApproval]:
    """What the run's calls wait for now (its `state` query, which a worker answers; `wait`:
    the query's RPC timeout, past which it raises `RPCError`)."""
    return await _handle(handle).pending(timeout=timedelta(seconds=wait) if wait is not None
                                         else None)


async def _read(handle: WorkflowHandle[Any, Any], kind: str,
                wait: float | None) -> tuple[list[PendingApproval], float | None]:
    """The run's pending calls, and what is left of `wait` for the decision (the state query
    takes at most half of it)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        async with asyncio.timeout(None if wait is None else wait / 2):
            calls = await pending(handle, wait=None if wait is None else wait / 2)
    except (TimeoutError, RPCError) as e:
        if wait is not None and (isinstance(e, TimeoutError) or e.status in (
                RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)):
            raise DecisionNotDelivered(kind, handle.id, wait, "no worker answered the run's "
                                       f"state query within {wait / 2:g}s, so it was not "
                                       "sent") from None
        raise
    left = None if wait is None else max(wait - (loop.time() - start), 0.0)
    return calls, left


def pick(calls: Sequence[PendingApproval], ref: str | int | None) -> PendingApproval:
    """The call `ref` names: its id, its index (`3` or `#3`), a unique prefix of its id, or
    nothing when exactly one call is pending."""
    if ref is None or ref == "":
        if len(calls) == 1:
            return calls[0]
        raise CallNotFound("no call is waiting" if not calls else
                           f"{len(calls)} calls are waiting: name one ("
                           + ", ".join(f"#{c.index} {c.call_id}" for c in calls) + ")")
    text = str(ref)
    for c in calls:
        if c.call_id == text:
            return c
    number = text.removeprefix("#")
    if number.isdigit():
        for c in calls:
            if c.index == int(number):
                return c
    found = [c for c in calls if c.call_id.startswith(text)]
    if len(found) == 1:
        return found[0]
    if found:
        raise CallNotFound(f"{text!r} is the start of {len(found)} call ids: "
                           + ", ".join(c.call_id for c in found))
    waiting = ", ".join(f"#{c.index} {c.call_id}" if c.index is not None else c.call_id
                        for c in calls) or "none"
    raise CallNotFound(f"no tool call {text!r} is waiting for approval (waiting: {waiting})")


def decision(call: PendingApproval, kind: DecisionKind, *, reason: str | None = None,
             args: Mapping[str, Any] | None = None, result: Any = None,
             remember: Scope | None = None, pattern: Mapping[str, Any] | None = None,
             message: str | None = None) -> Any:
    """The `Decision` of `kind` for `call`, naming its digest (`message`: a rejection's text
    for the model)."""
    from towline.workflows import Decision

    return Decision(kind=kind, call_id=call.call_id, digest=call.digest, reason=reason,
                    message=message,
                    args=dict(args) if args is not None else None, result=result,
                    remember=remember, pattern=dict(pattern) if pattern is not None else None)


async def decide(handle: WorkflowHandle[Any, Any], decisions: Sequence[Any], *,
                 by: str | None = None, wait: float | None = ACCEPT_WAIT) -> list[dict[str, Any]]:
    """Send `Decision`s in one `decide` update (all applied, or none); their audit entries.
    `DecisionPending` / `DecisionNotDelivered` when no worker takes it within `wait` seconds."""
    return await _decide(handle, decisions, by, wait, wait)


async def _decide(handle: WorkflowHandle[Any, Any], decisions: Sequence[Any], by: str | None,
                  wait: float | None, waited: float | None) -> list[dict[str, Any]]:
    from towline.workflows import Decisions

    return await _handle(handle).decide(Decisions(decisions=list(decisions), by=by), wait=wait,
                                        waited=waited)


async def _one(handle: WorkflowHandle[Any, Any], call: str | int | None, kind: DecisionKind, *,
               by: str | None, wait: float | None, **options: Any) -> dict[str, Any]:
    calls, left = await _read(handle, kind, wait)
    target = pick(calls, call)
    if target.kind == "client":
        if kind != "respond":
            raise CallNotFound(f"call {target.call_id} waits for a client tool's result: "
                               "respond to it")
        return await tool_result(handle, target.call_id, options.get("result"), by=by,
                                 digest=target.digest, wait=left)
    [entry] = await _decide(handle, [decision(target, kind, **options)], by, left, wait)
    return entry


async def approve(handle: WorkflowHandle[Any, Any], call: str | int | None = None, *,
                  reason: str | None = None, by: str | None = None, remember: Scope | None = None,
                  pattern: Mapping[str, Any] | None = None,
                  wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
    """Approve a pending call (see `pick` for `call`); its audit entry."""
    return await _one(handle, call, "approve", by=by, reason=reason, remember=remember,
                      pattern=pattern, wait=wait)


async def reject(handle: WorkflowHandle[Any, Any], call: str | int | None = None, *,
                 reason: str | None = None, by: str | None = None, remember: Scope | None = None,
                 pattern: Mapping[str, Any] | None = None,
                 message: str | None = None, wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
    """Reject a pending call: it is recorded `denied` and the model is told `message` (else the
    tool's rejection message, else `reason`); `reason` is recorded."""
    return await _one(handle, call, "reject", by=by, reason=reason, remember=remember,
                      pattern=pattern, message=message, wait=wait)


async def edit(handle: WorkflowHandle[Any, Any], call: str | int | None, args: Mapping[str, Any], *,
               reason: str | None = None, by: str | None = None, remember: Scope | None = None,
               pattern: Mapping[str, Any] | None = None,
               wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
    """Approve a pending call with other arguments (checked against the tool's schema)."""
    return await _one(handle, call, "edit", by=by, reason=reason, args=args, remember=remember,
                      pattern=pattern, wait=wait)


async def respond(handle: WorkflowHandle[Any, Any], call: str | int | None, result: Any, *,
                  reason: str | None = None, by: str | None = None, remember: Scope | None = None,
                  pattern: Mapping[str, Any] | None = None,
                  wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
    """Give a pending call its return: a reviewer's answer (the tool does not run), or a client
    tool's result."""
    return await _one(handle, call, "respond", by=by, reason=reason, result=result,
                      remember=remember, pattern=pattern, wait=wait)


async def _all(handle: WorkflowHandle[Any, Any], kind: DecisionKind, reason: str | None,
               by: str | None, wait: float | None,
               message: str | None = None) -> list[dict[str, Any]]:
    read, left = await _read(handle, kind, wait)
    calls = [c for c in read if c.kind == "approval"]
    if not calls:
        raise CallNotFound("no call is waiting for approval")
    return await _decide(handle, [decision(c, kind, reason=reason, message=message)
                                  for c in calls], by, left, wait)


async def approve_all(handle: WorkflowHandle[Any, Any], *, reason: str | None = None,
                      by: str | None = None,
                      wait: float | None = ACCEPT_WAIT) -> list[dict[str, Any]]:
    """Approve every call waiting for approval, at once."""
    return await _all(handle, "approve", reason, by, wait)


async def reject_all(handle: WorkflowHandle[Any, Any], *, reason: str | None = None,
                     by: str | None = None, message: str | None = None,
                     wait: float | None = ACCEPT_WAIT) -> list[dict[str, Any]]:
    """Reject every call waiting for approval, at once (`message`: as `reject`'s)."""
    return await _all(handle, "reject", reason, by, wait, message)


async def tool_result(handle: WorkflowHandle[Any, Any], call_id: str, result: Any = None, *,
                      by: str | None = None, digest: str | None = None, error: str | None = None,
                      retry: str | None = None,
                      wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
    """Give a pending client tool call its result (the `tool_result` update); or, engine 5, the
    `error` the tool failed with (the call is `failed`) or a `retry` request (the model is
    asked to call it again): either counts against the tool's `max_retries`."""
    from towline.workflows import ToolResultInput

    answer: dict[str, Any] = ({"error": error} if error is not None else
                              {"retry": retry} if retry is not None else {"result": result})
    if (error is not None or retry is not None) and result is not None:
        answer["result"] = result  # refused: one answer per call
    arg = ToolResultInput.model_validate({"call_id": call_id, "digest": digest, "by": by, **answer})
    await _handle(handle).tool_result(arg, wait=wait)
    return {"call_id": call_id, "decision": arg.answer}


async def set_policy(handle: WorkflowHandle[Any, Any], rules: Mapping[str, Any] | None = None, *,
                     default: str | None = None, by: str | None = None,
                     reason: str | None = None,
                     wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
    """Change the run's approval rules while it runs (`set_policy`); the policy now in force.

    `rules` maps tool names to "approve", "deny", "ask", `{"deny": "message"}` or None (back
    to the agent's rule)."""
    from towline.workflows import PolicyUpdate

    update = PolicyUpdate.model_validate({"rules": dict(rules or {}), "default": default,
                                          "by": by, "reason": reason})
    return await _handle(handle).set_policy(update, wait=wait)
