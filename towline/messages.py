"""Messages exchanged with a model, and the usage they cost.

A run's canonical history is a list of `Message`: a `ModelRequest` (what the
runtime or the user sent) or a `ModelResponse` (what the model answered). Both
carry a stable `id` so that history edits (`Remove(id)`) can name them. Every
type here is a frozen pydantic model: JSON-serialisable through Temporal's
pydantic data converter and replaced, never mutated.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from towline.media_parts import (  # the media parts: a module of their own, in this one's API
    MEDIA_KINDS,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    MediaPart,
    UserContent,
    as_media,
    media_in,
    media_label,
    prompt_text,
)
from towline.media_parts import FrozenModel as _Frozen
from towline.native_parts import (  # what providers run on their side: in this module's API
    NativeToolCallPart,
    NativeToolReturnPart,
    Suspended,
    native_label,
)

__all__ = [
    "Usage",
    "SystemPart",
    "UserPart",
    "TextPart",
    "ToolCallPart",
    "ToolReturnPart",
    "RetryPart",
    "ThinkingPart",
    "NativeToolCallPart",
    "NativeToolReturnPart",
    "Suspended",
    "native_label",
    "ImageUrl",
    "DocumentUrl",
    "BinaryContent",
    "MediaPart",
    "UserContent",
    "MEDIA_KINDS",
    "as_media",
    "media_in",
    "prompt_text",
    "media_label",
    "RequestPart",
    "ResponsePart",
    "ModelRequest",
    "ModelResponse",
    "Message",
    "no_messages",
    "MESSAGES",
    "ToolReturnStatus",
    "FinishReason",
    "RemoveAll",
    "Remove",
    "COMPACT",
]

COMPACT = "towline_compact"
"""Serialization context key (`{COMPACT: True}`): leave fields at their default out of the
JSON. towline's payload converter sets it, so histories do not repeat what a reader's
defaults restore; `model_dump` and `model_dump_json` without it write every field."""


def _compacting(info: SerializationInfo) -> bool:
    context: Any = info.context
    return isinstance(context, dict) and context.get(COMPACT) is True  # pyright: ignore[reportUnknownMemberType]


def _drop(data: Any, defaults: dict[str, Any]) -> Any:
    """`data` without the keys whose value is their default (a dict, or left as it is)."""
    if isinstance(data, dict):
        for key, default in defaults.items():
            if key in data and data[key] == default:
                del data[key]
    return data  # pyright: ignore[reportUnknownVariableType]


class _Compact(_Frozen):
    """A type whose fields at their default (`_compact_defaults`) a compacting dump leaves out."""

    _compact_defaults: ClassVar[dict[str, Any]] = {}
    """The fields left out of a `COMPACT` dump, with the value each is left out at."""

    @model_serializer(mode="wrap")
    def _wire(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        return _drop(data, self._compact_defaults) if _compacting(info) else data


class Usage(_Compact):
    """Token usage and cost of one or more model calls; `+` adds two usages.

    Cost is in US dollars. A request whose price is not known adds nothing to
    `cost` and one to `unpriced_requests`, so a sum with unknown parts is
    reported as a known lower bound plus how many requests it leaves out
    (`known_cost` is None then). Offline models (`TestModel`, `FunctionModel`)
    make no paid call: they cost 0.
    """

    requests: int = Field(default=0, ge=0)
    """Model requests this usage covers."""
    input_tokens: int = Field(default=0, ge=0)
    """Tokens sent to the model, cached ones included (never negative: a model reporting
    less fails its request)."""
    output_tokens: int = Field(default=0, ge=0)
    """Tokens the model produced."""
    cache_read_tokens: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    """Input tokens served from the provider's prompt cache (part of `input_tokens`)."""
    cache_write_tokens: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    """Input tokens written to the provider's prompt cache (part of `input_tokens`)."""
    reasoning_tokens: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    """Tokens the model spent thinking (part of `output_tokens`, priced as output)."""
    cost: float = Field(default=0.0, ge=0, allow_inf_nan=False, exclude_if=lambda v: v == 0)
    """US dollars spent on the requests whose price is known (finite: JSON has no infinity)."""
    unpriced_requests: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    """Requests whose price is not (wholly) known: not known at all (their cost is not in
    `cost`), or that used a native tool whose price is not known (their tokens are)."""
    native_tool_uses: dict[str, int] = Field(default_factory=dict[str, int],
                                             exclude_if=lambda v: not v)
    """Uses of the provider's native tools, by tool (`web_search`: searches made, `web_fetch`:
    pages fetched, `code_execution`, `file_search`, `mcp`: calls), priced where their price
    is known."""

    _compact_defaults: ClassVar[dict[str, Any]] = {
        "requests": 0, "input_tokens": 0, "output_tokens": 0}

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def known_cost(self) -> float | None:
        """`cost` when every request's price is known, else None (unknown, not zero)."""
        return self.cost if self.unpriced_requests == 0 else None

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost=self.cost + other.cost,
            unpriced_requests=self.unpriced_requests + other.unpriced_requests,
            native_tool_uses=_summed(self.native_tool_uses, other.native_tool_uses),
        )


def _summed(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Two counts by name, added."""
    if not b:
        return dict(a)
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted({*a, *b})}


ToolReturnStatus = Literal[
    "succeeded", "retry", "failed", "validation_error", "denied", "not_executed", "unknown"
]
"""The outcome recorded for every tool call; docs/concepts.md says what each one means."""

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]
"""How an answer ended, normalised across providers: `stop` (a final answer), `tool_calls`,
`length` (cut off by the token limit: none of its calls runs), `content_filter` (the provider
filtered or refused it: the run ends with `ContentFiltered` unless a hook handles it) and
`error` (the provider marked it unusable, e.g. a malformed function call: the model is asked
again, as an invalid output is). The provider's own value is in `ModelResponse.provider_details`."""


class SystemPart(_Frozen):
    """System instructions."""

    part_kind: Literal["system"] = "system"
    content: str


class UserPart(_Frozen):
    """A user prompt: text, or a list of text and media parts (images, documents, audio)."""

    part_kind: Literal["user"] = "user"
    content: str | list[UserContent]

    @property
    def text(self) -> str:
        """The prompt's text (media parts named by kind)."""
        return prompt_text(self.content)


class TextPart(_Frozen):
    """Text the model produced, with the citations the provider attached to it."""

    part_kind: Literal["text"] = "text"
    content: str
    citations: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]],
                                            exclude_if=lambda v: not v)
    """The sources the provider cites for this text, as it sent them (Anthropic `citations`,
    Responses `annotations`, Gemini grounding supports); sent back to the same provider
    where its API takes them."""


class ThinkingPart(_Compact):
    """A reasoning model's thinking, as it came, with the provider's opaque data.

    `signature` is what the provider needs back to go on from this thinking:
    Anthropic's signature (or, with `redacted=True`, a `redacted_thinking` block's
    data), a Responses reasoning item's `encrypted_content` (its item id in `id`), or
    a Gemini thought signature. It is sent back only to the `provider` family that
    made it, exactly as that API requires; a hook can read it but a changed one is
    refused by the provider.
    """

    part_kind: Literal["thinking"] = "thinking"
    content: str = ""
    """The thinking text (a summary, for providers that only show one; empty when redacted)."""
    signature: str | None = None
    """The provider's opaque data, sent back unchanged."""
    redacted: bool = False
    """The provider encrypted the thinking: `signature` holds it, `content` is empty."""
    provider: str | None = None
    """The provider family that produced it (`anthropic`, `openai`, `google`)."""
    id: str | None = None
    """The provider's id of the thinking item (a Responses reasoning item's id)."""

    _compact_defaults: ClassVar[dict[str, Any]] = {
        "content": "", "signature": None, "redacted": False, "provider": None, "id": None}

    def __repr__(self) -> str:
        sig = self.signature
        short = None if sig is None else (sig if len(sig) <= 16 else f"{sig[:12]}…({len(sig)})")
        return (f"ThinkingPart(content={self.content[:60]!r}, signature={short!r}, "
                f"redacted={self.redacted}, provider={self.provider!r})")


class ToolCallPart(_Compact):
    """A tool call the model asked for. `tool_call_id` is generated when missing."""

    part_kind: Literal["tool_call"] = "tool_call"
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    tool_call_id: str = ""
    kind: str = "function"
    metadata: dict[str, Any] = Field(default_factory=dict)
    raw_args: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The argument text exactly as the model sent it, kept only when it is not a JSON
    object (`args` is then empty): such a call is answered `validation_error`, never run."""

    _compact_defaults: ClassVar[dict[str, Any]] = {"kind": "function", "metadata": {}}


class ToolReturnPart(_Compact):
    """The one return record of a tool call, with its status."""

    part_kind: Literal["tool_return"] = "tool_return"
    tool_name: str
    tool_call_id: str
    content: Any = None
    status: ToolReturnStatus = "succeeded"

    _compact_defaults: ClassVar[dict[str, Any]] = {"status": "succeeded"}


class RetryPart(_Compact):
    """Asks the model to try again (bad output, or a tool's `ModelRetry`)."""

    part_kind: Literal["retry"] = "retry"
    content: str
    tool_name: str | None = None
    tool_call_id: str | None = None

    _compact_defaults: ClassVar[dict[str, Any]] = {"tool_name": None, "tool_call_id": None}


RequestPart = Annotated[
    SystemPart | UserPart | ToolReturnPart | RetryPart, Field(discriminator="part_kind")
]
ResponsePart = Annotated[
    TextPart | ToolCallPart | ThinkingPart | NativeToolCallPart | NativeToolReturnPart,
    Field(discriminator="part_kind"),
]


def _request_parts() -> list[RequestPart]:
    return []


def _response_parts() -> list[ResponsePart]:
    return []


class ModelRequest(_Frozen):
    """A message sent to the model."""

    kind: Literal["request"] = "request"
    id: str = ""
    parts: list[RequestPart] = Field(default_factory=_request_parts)


class ModelResponse(_Compact):
    """A message the model answered."""

    kind: Literal["response"] = "response"
    id: str = ""
    parts: list[ResponsePart] = Field(default_factory=_response_parts)
    usage: Usage = Field(default_factory=Usage)
    model_name: str | None = None
    finish_reason: FinishReason | None = None
    provider_details: dict[str, str] = Field(default_factory=dict[str, str],
                                             exclude_if=lambda v: not v)
    """What the provider said about how the answer ended, in its own words, under its own
    field names: Gemini's `finish_reason` and `finish_message` (or, for a prompt it blocked,
    `block_reason` and `block_reason_message`), Anthropic's `stop_reason`, Chat Completions'
    `finish_reason` and `refusal`, the Responses API's `status`, `incomplete_reason`,
    `refusal` and `error_code`. `finish_reason` is the normalised one; this keeps the raw
    value (`MODEL_ARMOR`, `refusal`, ...) that a `ContentFiltered` failure names."""
    suspended: Suspended | None = Field(default=None, exclude_if=lambda v: v is None)
    """Set while the provider has not finished the response (see `Suspended`): the run's step
    completes it with more requests; a response in the history never has it."""

    _compact_defaults: ClassVar[dict[str, Any]] = {"model_name": None, "finish_reason": None}

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.content for p in self.parts if isinstance(p, TextPart))

    @property
    def thinking(self) -> list[ThinkingPart]:
        """The thinking parts, in order."""
        return [p for p in self.parts if isinstance(p, ThinkingPart)]

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        """The tool-call parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def native_tool_calls(self) -> list[tuple[NativeToolCallPart, NativeToolReturnPart | None]]:
        """The provider's native tool calls, in order, each with its return (None while the
        provider has not reported it, e.g. in a paused turn)."""
        returns = {p.tool_call_id: p for p in self.parts if isinstance(p, NativeToolReturnPart)}
        return [(p, returns.get(p.tool_call_id)) for p in self.parts
                if isinstance(p, NativeToolCallPart)]


Message = Annotated[ModelRequest | ModelResponse, Field(discriminator="kind")]
"""One message of a conversation: a `ModelRequest` (what was sent) or a `ModelResponse` (what
the model answered), told apart by `kind` when read back from JSON."""


MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
"""Validates and serialises a list of messages (JSON, Python, or copies)."""


def no_messages() -> list[Message]:
    """A typed empty message list (a `default_factory`)."""
    return []


class RemoveAll(_Frozen):
    """A `messages` instruction: drop the whole canonical history so far."""

    op: Literal["remove_all"] = "remove_all"


class Remove(_Frozen):
    """A `messages` instruction: drop the message with this id (`Remove(message.id)`)."""

    op: Literal["remove"] = "remove"
    id: str

    def __init__(self, id: str | None = None, /, **data: Any) -> None:
        if id is not None:
            data["id"] = id
        super().__init__(**data)
