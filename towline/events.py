"""Live events of a run: what `towline watch`, `towline run` and `towline.client.events` show.

A run publishes its events to its own Temporal Workflow Stream
(`temporalio.contrib.workflow_streams`, topic `EVENTS_TOPIC`): the workflow
publishes the run's lifecycle (a step starts, the model answered, a tool
started and ended, an approval is needed and decided, the result or the
failure), which costs no history event at all; the model activity of a run
that streams publishes the text as it arrives, in batches (one signal each,
a bounded number per model call). Every event has an `offset`: its position
in the run's stream, from 0, without gaps, carried across continue-as-new,
so a reader that reconnects from `offset + 1` of the last event it saw gets
every later event exactly once.

Events are JSON objects with a `type` (below) and the fields of that type;
`RunEvent` reads one. Text and thinking deltas are a preview: the `response`
event that follows them is the record (after a retried model call, `attempt` > 1,
the text starts over). Events carry previews, never bytes: a media part (an
attached image, a tool's PDF) reads as `[image/png, 5000000 bytes]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from towline.messages import ModelResponse, ThinkingPart, ToolReturnPart, media_label

__all__ = ["EVENTS_TOPIC", "EVENT_TYPES", "EventType", "RunEvent", "PREVIEW_CHARS", "preview",
           "thinking_text", "response_fields", "tool_end_fields"]

EVENTS_TOPIC: Final = "towline.events"
"""The Workflow Streams topic a run's events are published on."""

class EventType(StrEnum):
    """An event's `type`, the one definition of them (the stream carries the plain string, so
    a member compares equal to it: `event.type == EventType.RESPONSE`)."""

    RUN = "run"
    STEP = "step"
    THINKING = "thinking"
    TEXT = "text"
    RESPONSE = "response"
    TOOL_START = "tool_start"
    TOOL_END = "tool_end"
    APPROVAL = "approval"
    DECISION = "decision"
    GUARDRAIL = "guardrail"
    HANDOFF = "handoff"
    USER = "user"
    ANSWER = "answer"
    RESULT = "result"
    FAILED = "failed"
    CLIENT_TOOL = "client_tool"
    INTERRUPTED = "interrupted"
    RETRY = "retry"
    OUTPUT_RETRY = "output_retry"


EVENT_TYPES: Final[tuple[str, ...]] = tuple(t.value for t in EventType)
"""Every event type, in the order a run usually publishes them (`EventType`'s values)."""

PREVIEW_CHARS: Final = 2000
"""Characters of a prompt or tool result an event carries (the history keeps all of it)."""


def preview(value: Any, limit: int = PREVIEW_CHARS) -> Any:
    """`value` as an event carries it: strings cut at `limit` characters, media parts (or
    their JSON form) named by kind and size instead of their bytes (a list of text and media
    reads as one text, as `prompt_text` gives a prompt), others as they are."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    label = media_label(value)
    if label is not None:
        return label
    if _has_media(value):  # text and media read as text; other JSON keeps its shape
        items: list[Any] = [preview(v, limit) for v in value]
        return preview("\n".join(items), limit) if all(isinstance(v, str) for v in items) else items
    return value


def _has_media(value: Any) -> bool:
    """Whether `value` is a list (or tuple) holding a media part."""
    return isinstance(value, list | tuple) and any(media_label(v) is not None for v in value)  # pyright: ignore[reportUnknownVariableType]


def thinking_text(parts: Sequence[ThinkingPart]) -> str:
    """The readable text of a response's thinking: each part's text, `[redacted]` for one the
    provider encrypted, `[hidden]` for one it gave no text of (an encrypted reasoning item)."""
    texts = [p.content if p.content else "[redacted]" if p.redacted else "[hidden]" for p in parts]
    return "\n\n".join(texts)


def response_fields(step: int, response: ModelResponse) -> dict[str, Any]:
    """The fields of the `response` event of a committed turn (the record the text deltas
    preview). A response that thought says so in `thinking` (its thinking text, cut like any
    preview, so a run that does not stream shows it too) and in `usage.reasoning_tokens`; the
    provider's own tools it ran are in `native_tools` (each call with its result's status and
    a preview of its content) and `usage.native_tool_uses`."""
    calls = [{"call_id": c.tool_call_id, "tool": c.tool_name, "args": c.args}
             for c in response.tool_calls]
    usage: dict[str, Any] = {"input_tokens": response.usage.input_tokens,
                             "output_tokens": response.usage.output_tokens}
    if response.usage.reasoning_tokens:
        usage["reasoning_tokens"] = response.usage.reasoning_tokens
    if response.usage.native_tool_uses:
        usage["native_tool_uses"] = dict(response.usage.native_tool_uses)
    native = [{"call_id": c.tool_call_id, "tool": c.tool_name, "args": c.args, "provider": c.provider,
               "status": None if r is None else r.status,
               "content": None if r is None else preview(r.content)}
              for c, r in response.native_tool_calls]
    thought = response.thinking
    return {"step": step, "text": response.text or None,
            "thinking": preview(thinking_text(thought)) if thought else None,
            "tool_calls": calls or None, "native_tools": native or None,
            "finish_reason": response.finish_reason, "model": response.model_name, "usage": usage}


def tool_end_fields(step: int, ret: ToolReturnPart) -> dict[str, Any]:
    """The fields of the `tool_end` event of a call's return."""
    return {"step": step, "call_id": ret.tool_call_id, "tool": ret.tool_name,
            "status": ret.status, "content": preview(ret.content)}


class RunEvent(BaseModel):
    """One event of a run's stream (unknown fields are kept, for events of newer versions)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str
    """One of `EVENT_TYPES`: `run` (started: agent, model, prompt, streaming), `step` (a model
    request starts), `thinking` (a piece of the model's thinking, streamed apart from its
    answer: `delta`, `attempt`), `text` (a piece of the model's text: `delta`, `attempt`),
    `response` (the model answered: `text`, `thinking` (a preview of its thinking, when it
    thought), `tool_calls`, `native_tools` (the provider's own tools it ran: `call_id`,
    `tool`, `args`, `provider`, `status`, `content`), `finish_reason`, `usage`), `tool_start` /
    `tool_end` (`call_id`, `tool`, `args`; `status` and `content` at the end), `approval`
    (a call waits for a human: `call_id`, `tool`, `args`, `digest`, `index`, `decisions`),
    `decision` (an audit entry: `call_id`, `tool`, `decision` — approved, rejected, edited,
    responded, denied, timed_out, result, policy —, `source`, `by`, `update_id`, `reason`,
    `digest`, `at`), `guardrail` (a guardrail acted: `guardrail`, `guards` (`input`,
    `output`, `tool_call`, `tool_result`), `action` (`tripped`, `denied`, `withheld`,
    `replaced`, `redacted`), `said`, `call_id`), `handoff` (the run continues as another
    agent: `from_agent`, `to_agent`, `call_id`, `path`, the agents from the first to the
    active one), `client_tool` (a client tool's call waits for its result: the same fields
    as `approval`, and its tool's `metadata` when it has some), `interrupted`
    (a session's `send` cancelled the model request in flight), `retry` (a model request's
    attempt failed and the next one started: `activity_id`, `what`, `attempt` (the failed
    one), `failure`, `failure_type`, `worker_lost`), `output_retry` (the model's output was
    invalid and it is asked again: `message`), `user` (a message sent to the
    run), `answer` (a session's answer; it waits for the next message), `result` (the run
    succeeded: `output`, `counters`), `failed` (`reason`, `message`)."""
    offset: int = -1
    """The event's position in the run's stream, from 0 (-1: not read from a stream)."""
    step: int | None = None
    """The run step (model request number) the event belongs to, when it belongs to one."""

    def field(self, name: str, default: Any = None) -> Any:
        """A field of this event type (see `type`), or `default`."""
        extra = self.model_extra or {}
        return extra.get(name, default)

    def to_json(self) -> dict[str, Any]:
        """The event as JSON data: `offset` and `type` first, then its fields."""
        data = self.model_dump(mode="json", exclude_none=True)
        return {"offset": data.pop("offset"), "type": data.pop("type"), **data}
