"""A run's live events as AG-UI events: what `towline serve` streams for one turn of a thread.

An AG-UI run is one turn of a towline session: from the user's message to the session's
`answer` (the run then waits for the next message), or to the run's `result` or failure.
`TurnMapper` turns the run's events (`towline.events.RunEvent`) into the protocol's:

| towline event | AG-UI events |
|---|---|
| `step` | `STEP_STARTED` (`step N`) |
| `thinking` | `REASONING_START`, `REASONING_MESSAGE_START` / `_CONTENT` (closed by the text or the response) |
| `text` | `TEXT_MESSAGE_START` (role `assistant`), `TEXT_MESSAGE_CONTENT` |
| `response` | `TEXT_MESSAGE_END` (the whole text, when it was not streamed), `TOOL_CALL_START` / `_ARGS` / `_END` per call, the provider's native tools each as a call and its `TOOL_CALL_RESULT` (`provider` in `metadata.towline`), `STEP_FINISHED` |
| `tool_end` | `TOOL_CALL_RESULT` (its `status` in `metadata.towline`) |
| `answer`, `result` | `RUN_FINISHED` (`result`: the output) |
| `failed` | `RUN_ERROR` (`code`: the failure reason; an `InternalError`'s raw text stays in the run's history) |
| any other (`run`, `user`, `tool_start`, `approval`, `client_tool`, `decision`) | `CUSTOM`, named `towline.<type>`, its value the event's JSON |

A turn that waits ends its AG-UI run (`towline.serve.waits`): at an `approval` (unless the
client streams through approvals, `interrupts=False`) with `RUN_FINISHED` whose outcome is
the interrupt, one per waiting call; at a `client_tool` with `RUN_FINISHED` whose success
outcome names the `pendingToolCallIds`. The server asks the run what waits (`finish_waiting`):
the calls of one response wait together.

Message ids are derived from the workflow id and the step, so a stream resumed from an
offset names the messages the first one opened. On the wire (`sse`) the last AG-UI event
made from a run event carries that event's offset as its SSE `id` (`RUN_STARTED`: the
offset before the turn's first): a reader resumes from the offset after the last `id` it
got, and nothing is lost or repeated.

Pure functions and data: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from towline.events import RunEvent
from towline.review import PendingApproval
from towline.serve.agui_input import InputError, history, user_text
from towline.serve.decide import failure_text
from towline.serve.waits import interrupt

__all__ = ["CUSTOM_PREFIX", "TURN_ENDS", "TurnMapper", "sse", "user_text", "history",
           "InputError"]  # the input's helpers live in `agui_input`

CUSTOM_PREFIX: Final = "towline."
"""The prefix of the `CUSTOM` events' names: `towline.approval`, `towline.tool_start`, ..."""
TURN_ENDS: Final = frozenset({"answer", "result", "failed"})
"""Run events that end a turn (an AG-UI run)."""

_ENCODER = EventEncoder()


class TurnMapper:
    """Maps the run events of one turn to AG-UI events (keeps which messages are open).

    `streaming` says whether the run streams its text (the agent's `ModelSettings.stream`):
    a mapper that joins a step after its start (a resumed stream) then knows whether the
    step's text already went out as deltas. `awaiting_user` (a message sent to a running
    session): the turn ends only after the run took a message (`user`), so an answer to an
    earlier message still in flight does not end it. `interrupts`: a call waiting for approval
    ends the turn with the interrupt outcome (False: the stream goes on through the wait, and
    the call is decided elsewhere).
    """

    def __init__(self, workflow_id: str, thread_id: str, run_id: str, *, streaming: bool = False,
                 awaiting_user: bool = False, interrupts: bool = True) -> None:
        self.workflow_id = workflow_id
        self.thread_id = thread_id
        self.run_id = run_id
        self.streaming = streaming
        self.awaiting_user = awaiting_user
        self.interrupts = interrupts
        self.finished = False
        """Whether the turn has ended (`RUN_FINISHED` or `RUN_ERROR` was made)."""
        self.waiting: str | None = None
        """Set by an event the turn ends at (`approval` or `client_tool`), for `finish_waiting`."""
        self._text: str | None = None
        self._reasoning: str | None = None
        self._steps: set[int] = set()
        self._streamed: set[tuple[int, str]] = set()

    def message_id(self, step: int, kind: str = "text", attempt: int = 1) -> str:
        """The id of a step's text (or `thinking`) message; a retried model call's attempt
        starts another."""
        suffix = "" if attempt <= 1 else f".{attempt}"
        return f"{self.workflow_id}:{step}{'' if kind == 'text' else ':' + kind}{suffix}"

    def map(self, event: RunEvent) -> list[BaseEvent]:
        """The AG-UI events for one run event (in order)."""
        kind = event.type
        step = event.step or 0
        if kind == "user":
            self.awaiting_user = False
        if kind == "step":
            self._steps.add(step)
            return [*self._close_all(), StepStartedEvent(step_name=f"step {step}")]
        if kind in ("text", "thinking"):
            return self._delta(event, step, kind)
        if kind == "response":
            return self._response(event, step)
        if kind == "tool_end":
            return [self._result(str(event.field("call_id")), event.field("content"),
                                 status=event.field("status"), tool=event.field("tool"),
                                 step=event.step)]
        if kind in TURN_ENDS and not (kind == "answer" and self.awaiting_user):
            self.finished = True
            closing = self._close_all()
            if kind == "failed":
                return [*closing, RunErrorEvent(message=failure_text(event.field("reason"),
                                                                    event.field("message")),
                                                code=str(event.field("reason") or "Failed"))]
            return [*closing, RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                               result=event.field("output"))]
        if kind == "client_tool" or (kind == "approval" and self.interrupts):
            self.waiting = kind
        return [CustomEvent(name=CUSTOM_PREFIX + kind, value=event.to_json())]

    def finish_waiting(self, calls: list[PendingApproval]) -> list[BaseEvent]:
        """The end of a turn that waits for `calls` (the run's pending calls now): the interrupt
        outcome for the approvals (when the client takes interrupts), else the success outcome
        naming the front-end tool calls; nothing if none waits (decided meanwhile)."""
        self.waiting = None
        asked = [c for c in calls if c.kind == "approval"] if self.interrupts else []
        client = [c.call_id for c in calls if c.kind == "client"]
        if not asked and not client:
            return []
        self.finished = True
        outcome = (RunFinishedInterruptOutcome(interrupts=[interrupt(c) for c in asked]) if asked
                   else RunFinishedSuccessOutcome(pending_tool_call_ids=client))
        return [*self._close_all(), RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                                     outcome=outcome)]

    def _delta(self, event: RunEvent, step: int, kind: str) -> list[BaseEvent]:
        attempt = int(event.field("attempt") or 1)
        mid = self.message_id(step, kind, attempt)
        delta = str(event.field("delta") or "")
        self._streamed.add((step, kind))
        out: list[BaseEvent] = []
        if kind == "thinking":
            if self._reasoning != mid:
                out += self._close_all()
                out += [ReasoningStartEvent(message_id=mid), ReasoningMessageStartEvent(message_id=mid)]
                self._reasoning = mid
            return [*out, ReasoningMessageContentEvent(message_id=mid, delta=delta)]
        out += self._close_reasoning()
        if self._text != mid:
            out += self._close_text()
            out.append(TextMessageStartEvent(message_id=mid, role="assistant"))
            self._text = mid
        return [*out, TextMessageContentEvent(message_id=mid, delta=delta)]

    def _whole(self, step: int, kind: str) -> bool:
        """Whether a response's text (or thinking) goes out whole: none of it was streamed,
        here or (a step this mapper saw start, or a run that does not stream) before."""
        return (step, kind) not in self._streamed and (step in self._steps or not self.streaming)

    def _response(self, event: RunEvent, step: int) -> list[BaseEvent]:
        out = self._close_reasoning()
        thinking = event.field("thinking")
        if thinking and self._whole(step, "thinking"):
            mid = self.message_id(step, "thinking")
            out += [ReasoningStartEvent(message_id=mid), ReasoningMessageStartEvent(message_id=mid),
                    ReasoningMessageContentEvent(message_id=mid, delta=str(thinking)),
                    ReasoningMessageEndEvent(message_id=mid), ReasoningEndEvent(message_id=mid)]
        parent = self._text or self.message_id(step)
        out += self._close_text()
        text = event.field("text")
        if text and self._whole(step, "text"):
            out += [TextMessageStartEvent(message_id=parent, role="assistant"),
                    TextMessageContentEvent(message_id=parent, delta=str(text)),
                    TextMessageEndEvent(message_id=parent)]
        calls: list[dict[str, Any]] = event.field("tool_calls") or []
        native: list[dict[str, Any]] = event.field("native_tools") or []
        for i, call in enumerate([*calls, *native]):  # native: the provider ran it, result and all
            call_id = str(call.get("call_id"))
            out += [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(call.get("tool")),
                                       parent_message_id=parent),
                    ToolCallArgsEvent(tool_call_id=call_id,
                                      delta=json.dumps(call.get("args") or {}, ensure_ascii=False)),
                    ToolCallEndEvent(tool_call_id=call_id)]
            if i >= len(calls) and call.get("status") is not None:
                out.append(self._result(call_id, call.get("content"), status=call.get("status"),
                                        tool=call.get("tool"), provider=call.get("provider"),
                                        step=step))
        return [*out, StepFinishedEvent(step_name=f"step {step}")]

    def _result(self, call_id: str, content: Any, **towline: Any) -> ToolCallResultEvent:
        """A tool call's result (`towline`: the metadata it carries under `towline`)."""
        return ToolCallResultEvent(message_id=f"{self.workflow_id}:result:{call_id}",
                                   tool_call_id=call_id, role="tool", content=_as_text(content),
                                   metadata={"towline": towline})

    def _close_text(self) -> list[BaseEvent]:
        if self._text is None:
            return []
        mid, self._text = self._text, None
        return [TextMessageEndEvent(message_id=mid)]

    def _close_reasoning(self) -> list[BaseEvent]:
        if self._reasoning is None:
            return []
        mid, self._reasoning = self._reasoning, None
        return [ReasoningMessageEndEvent(message_id=mid), ReasoningEndEvent(message_id=mid)]

    def _close_all(self) -> list[BaseEvent]:
        return [*self._close_reasoning(), *self._close_text()]


def _as_text(value: Any) -> str:
    """A tool result as the text `TOOL_CALL_RESULT` carries (JSON for other values)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def sse(events: Sequence[BaseEvent], offset: int | None = None) -> str:
    """Server-sent events for `events` (the protocol's encoder); the last carries `id: offset`."""
    blocks = [_ENCODER.encode(e) for e in events]
    if offset is not None:
        blocks = blocks or [":\n\n"]
        blocks[-1] = f"id: {offset}\n{blocks[-1]}"
    return "".join(blocks)
