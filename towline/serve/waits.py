"""What a turn of `towline serve` waits for, in AG-UI's own terms, and the input that answers it.

A call waiting for approval ends the AG-UI run with the interrupt outcome (`RUN_FINISHED`,
`outcome: {"type": "interrupt", "interrupts": [...]}`), one `Interrupt` per waiting call; the
client's next `RunAgentInput` answers them in `resume` (one `ResumeEntry` each), which the
server sends to the run as one `decide` update: all applied, or none. An interrupt's id is
`CALL_ID@DIGEST`, so its answer is bound to the call it was made for (the update refuses it if
the call waiting under that id is another).

A call of a front-end tool (an AG-UI `tools` entry, a client tool of the run) ends the AG-UI
run with the success outcome and `pendingToolCallIds`; the client runs the tool and sends its
result as a `tool` message (`toolCallId`) at the end of the next input's `messages`: each is
delivered through the `tool_result` update.

Pure functions and data: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import Interrupt, Message, ResumeEntry, RunAgentInput, ToolMessage, UserMessage
from pydantic import BaseModel, ConfigDict, ValidationError

from towline.review import PendingApproval
from towline.serve.agui_input import InputError, content_text, history, user_text
from towline.workflows.decisions import DecisionKind

__all__ = ["INTERRUPT_REASON", "Resume", "ToolResults", "ToolFailed", "NewMessage", "TurnInput", "interrupt",
           "interrupt_id", "parse_interrupt_id", "turn_input", "response_schema"]

INTERRUPT_REASON = "tool_approval"
"""The `reason` of an interrupt for a call waiting for approval."""


class ResumePayload(BaseModel):
    """The `payload` of a `ResumeEntry` answering an approval interrupt."""

    model_config = ConfigDict(extra="forbid")

    decision: DecisionKind
    """What the reviewer decided (one of the interrupt's `metadata.towline.decisions`)."""
    reason: str | None = None
    """Recorded with the decision; told to the model on a rejection (unless `message` is)."""
    message: str | None = None
    """reject only: the exact text the model is told of the rejection (engine 5), over the
    tool's configured rejection message and `reason`."""
    args: dict[str, Any] | None = None
    """edit: the arguments the call runs with instead."""
    result: Any = None
    """respond: the call's return (the tool does not run)."""
    by: str | None = None
    """Who decided (the audit trail)."""


@dataclass(frozen=True)
class Resume:
    """An input answering the interrupts of the previous AG-UI run."""

    decisions: list[dict[str, Any]]
    """One `Decision` (as JSON) per resume entry."""
    by: str | None = None
    """Who decided (the payloads' `by`: one for the whole resume)."""


@dataclass(frozen=True)
class ToolFailed:
    """A `tool` message's `error`: the front end's tool failed (the call is `failed`)."""

    error: str
    """What the model is told."""


@dataclass(frozen=True)
class ToolResults:
    """An input ending in `tool` messages: the results of front-end tool calls."""

    results: list[tuple[str, Any]]
    """(call id, result) per message, in order; a `ToolFailed` for a message with an `error`."""


@dataclass(frozen=True)
class NewMessage:
    """An input ending in the user's message: a turn of the conversation."""

    text: str
    """The message."""
    earlier: list[Any]
    """The conversation before it (a run's message history, if the thread's run has ended)."""


TurnInput = Resume | ToolResults | NewMessage


def interrupt_id(call: PendingApproval) -> str:
    """`CALL_ID@DIGEST` (just the call id for a run started before digests)."""
    return f"{call.call_id}@{call.digest}" if call.digest else call.call_id


def parse_interrupt_id(text: str) -> tuple[str, str | None]:
    """(call id, digest) of an interrupt id."""
    call_id, at, digest = text.rpartition("@")
    return (call_id, digest) if at and call_id else (text, None)


def response_schema(decisions: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of a resume payload for a call allowing `decisions`."""
    return {"type": "object", "required": ["decision"], "additionalProperties": False,
            "properties": {"decision": {"enum": list(decisions)},
                           "reason": {"type": "string"}, "message": {"type": "string"},
                           "args": {"type": "object"},
                           "result": {}, "by": {"type": "string"}}}


def interrupt(call: PendingApproval) -> Interrupt:
    """The AG-UI interrupt for a call waiting for approval."""
    args = json.dumps(call.args, ensure_ascii=False, sort_keys=True)
    return Interrupt(
        id=interrupt_id(call), reason=INTERRUPT_REASON, tool_call_id=call.call_id,
        message=f"{call.tool_name}({args}) waits for approval",
        response_schema=response_schema(call.decisions),
        expires_at=call.expires_at.isoformat() if call.expires_at else None,
        metadata={"towline": {"tool": call.tool_name, "args": call.args, "digest": call.digest,
                              "index": call.index, "decisions": list(call.decisions),
                              **({"metadata": call.metadata} if call.metadata is not None else {})}})


def _resume(entries: Sequence[ResumeEntry]) -> Resume:
    decisions: list[dict[str, Any]] = []
    by: set[str] = set()
    for entry in entries:
        call_id, digest = parse_interrupt_id(entry.interrupt_id)
        if entry.status == "cancelled":
            decisions.append({"kind": "reject", "call_id": call_id, "digest": digest,
                              "reason": "cancelled by the client"})
            continue
        try:
            payload = ResumePayload.model_validate(entry.payload)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "payload"
            raise InputError(f"resume {entry.interrupt_id!r}: {where}: {first['msg']} (expected "
                             '{"decision": "approve"|"reject"|"edit"|"respond", ...})') from None
        if payload.by is not None:
            by.add(payload.by)
        decisions.append({k: v for k, v in {
            "kind": payload.decision, "call_id": call_id, "digest": digest,
            "reason": payload.reason, "message": payload.message, "args": payload.args,
            "result": payload.result,
        }.items() if v is not None})
    if len(by) > 1:
        raise InputError(f"one resume is decided by one person: its payloads name {sorted(by)}")
    return Resume(decisions, next(iter(by), None))


def _tool_result(message: ToolMessage) -> Any:
    """A tool message's content as the call's result: JSON when it is JSON, else the text; its
    `error`, when it has one, as a `ToolFailed`."""
    if message.error:
        return ToolFailed(message.error)
    text = content_text(message.content)
    try:
        return json.loads(text)
    except ValueError:
        return text


def turn_input(inp: RunAgentInput) -> TurnInput:
    """What a `RunAgentInput` asks of the thread's run (`InputError` if nothing towline can run)."""
    if inp.resume:
        return _resume(inp.resume)
    messages: Sequence[Message] = inp.messages
    trailing: list[ToolMessage] = []
    for m in reversed(messages):
        if not isinstance(m, ToolMessage):
            break
        trailing.insert(0, m)
    if trailing:
        return ToolResults([(m.tool_call_id, _tool_result(m)) for m in trailing])
    if messages and not isinstance(messages[-1], UserMessage):
        raise InputError("the last message must be the user's (role 'user'), or tool results "
                         "(role 'tool'), or the input must resume the run's interrupts")
    return NewMessage(user_text(messages), history(messages))
