"""Messages exchanged with a model, their parts, and the usage they cost.

A run's canonical history is a list of `Message`: a `ModelRequest` (what the
runtime or the user sent) or a `ModelResponse` (what the model answered). Both
carry a stable `id` so that history edits (`Remove(id)`) can name them. Every
type here is a frozen pydantic model: JSON-serialisable through Temporal's
pydantic data converter and replaced, never mutated.

Media parts. A prompt (`UserPart.content`, `RunInput.prompt`) is text or a list of text and
images, documents and audio (`ImageUrl`, `DocumentUrl`, `BinaryContent`), and a tool may
return them. Each provider sends them in its own form; in JSON (a run's input, a history)
bytes are standard base64, and a large payload goes through the payload store like any other.

Native tool parts. `NativeToolCallPart` and `NativeToolReturnPart` are `ModelResponse` parts:
the provider ran the tool (a web search, code in its container, a call to a remote MCP
server) while it answered, so the call and its result come back together, in the response,
and towline executes nothing. `provider_data` keeps the provider's own record exactly as it
came (an Anthropic `server_tool_use` or `web_search_tool_result` block with its encrypted
content, a Responses `web_search_call` item, a Gemini `executable_code` part with its thought
signature): it is what goes back to the same provider family on the next request, never to
another. `args` and `content` are readable copies for people and hooks; changing them changes
nothing sent. `Suspended` marks a response its provider has not finished (Anthropic's
`pause_turn`, an OpenAI background response still queued or in progress): the run's step
goes on with more requests until it is complete (`ModelResponse.suspended`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    field_serializer,
    model_serializer,
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


class _Frozen(BaseModel):
    """The base of the message types: frozen, and no field it does not declare."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class _Compact(_Frozen):
    """A type whose fields at their default (`_compact_defaults`) a compacting dump leaves out."""

    _compact_defaults: ClassVar[dict[str, Any]] = {}
    """The fields left out of a `COMPACT` dump, with the value each is left out at."""

    @model_serializer(mode="wrap")
    def _wire(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        return _drop(data, self._compact_defaults) if _compacting(info) else data


# --- media parts --------------------------------------------------------------------------


class ImageUrl(_Frozen):
    """An image the provider fetches from a URL (or a `data:` URL)."""

    kind: Literal["image-url"] = "image-url"
    url: str
    media_type: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """`image/png`, `image/jpeg`, ...; guessed from the URL's suffix when None."""


class DocumentUrl(_Frozen):
    """A document (a PDF, a text file) the provider fetches from a URL."""

    kind: Literal["document-url"] = "document-url"
    url: str
    media_type: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """`application/pdf`, `text/plain`, ...; guessed from the URL's suffix when None."""


class BinaryContent(_Frozen):
    """Bytes of an image, a document or audio, with their media type.

    In JSON (a run's input, a history) the bytes are base64 text; a large one
    travels through the payload store like any other large payload.
    """

    model_config = ConfigDict(val_json_bytes="base64")

    kind: Literal["binary"] = "binary"
    data: bytes
    media_type: str
    """`image/png`, `application/pdf`, `audio/wav`, ..."""

    @field_serializer("data", when_used="json")
    def _standard_base64(self, data: bytes) -> str:
        # not pydantic's `ser_json_bytes="base64"`, which writes the URL-safe alphabet: JSON
        # readers (other clients, the codec server, `base64 -d`) expect the standard one
        return base64.b64encode(data).decode("ascii")

    @property
    def base64(self) -> str:
        """The bytes as base64 text."""
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self) -> str:
        """The bytes as a `data:` URL."""
        return f"data:{self.media_type};base64,{self.base64}"

    def __repr__(self) -> str:
        return f"BinaryContent(<{len(self.data)} bytes>, media_type={self.media_type!r})"


MediaPart = Annotated[ImageUrl | DocumentUrl | BinaryContent, Field(discriminator="kind")]
"""An image, a document or audio: by URL, or as bytes."""

UserContent = str | MediaPart
"""One item of a prompt: text, or a media part."""

MEDIA_KINDS = frozenset({"image-url", "document-url", "binary"})
"""The `kind` tags of the media parts (how they read in JSON)."""

_MEDIA: TypeAdapter[ImageUrl | DocumentUrl | BinaryContent] = TypeAdapter(MediaPart)


def as_media(value: Any) -> ImageUrl | DocumentUrl | BinaryContent | None:
    """`value` as a media part: the part itself, or its JSON form (a tool's return read back
    from history is a dict); None for anything else."""
    if isinstance(value, ImageUrl | DocumentUrl | BinaryContent):
        return value
    if isinstance(value, dict) and value.get("kind") in MEDIA_KINDS:  # pyright: ignore[reportUnknownMemberType]
        try:
            if value.get("kind") == "binary" and isinstance(value.get("data"), str):  # pyright: ignore[reportUnknownMemberType]
                return _MEDIA.validate_json(json.dumps(value))
            return _MEDIA.validate_python(value)
        except (ValidationError, ValueError):
            return None
    return None


def media_in(content: Any) -> tuple[list[Any], list[ImageUrl | DocumentUrl | BinaryContent]]:
    """A prompt's or a tool return's content split into its other items and its media parts.

    A single value is read as a one-item list. Text and any other JSON stay in the first
    list, in order; media parts (instances or their JSON form) go to the second."""
    values: list[Any] = list(content) if isinstance(content, list | tuple) else [content]  # pyright: ignore[reportUnknownArgumentType]
    rest: list[Any] = []
    media: list[ImageUrl | DocumentUrl | BinaryContent] = []
    for v in values:
        m = as_media(v)
        if m is None:
            rest.append(v)
        else:
            media.append(m)
    return rest, media


def media_label(value: Any) -> str | None:
    """`[image/png, 5000000 bytes]` or `[image-url: https://...]` for a media part or its JSON
    form (sized from its base64 text, which is not decoded): how previews, events and
    summaries name media, never with their bytes; None for anything else."""
    if isinstance(value, BinaryContent):
        return f"[{value.media_type}, {len(value.data)} bytes]"
    if isinstance(value, ImageUrl | DocumentUrl):
        return f"[{value.kind}: {value.url[:80]}]"
    if not isinstance(value, dict):
        return None
    item: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    kind = item.get("kind")
    if kind not in MEDIA_KINDS:
        return None
    if kind != "binary":
        return f"[{kind}: {str(item.get('url'))[:80]}]"
    data = item.get("data")
    if isinstance(data, str):  # base64 text
        size = len(data) * 3 // 4 - data[-2:].count("=")
    else:
        size = len(data) if isinstance(data, bytes) else 0
    return f"[{item.get('media_type')}, {size} bytes]"


def prompt_text(content: str | Sequence[Any]) -> str:
    """A prompt's text (its media parts named by `media_label`), for previews and summaries."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for item in content:
        label = item if isinstance(item, str) else media_label(item)
        if label is not None:
            texts.append(label)
    return "\n".join(texts)


# --- usage and the request and response parts ---------------------------------------------


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


# --- what a provider runs on its own side -------------------------------------------------


def _empty(value: Any) -> bool:
    return not value


class NativeToolCallPart(_Frozen):
    """A call of a provider's native tool, made and executed by the provider in this response."""

    part_kind: Literal["native_tool_call"] = "native_tool_call"
    tool_name: str
    """towline's name of the tool (`web_search`, `web_fetch`, `code_execution`, `file_search`,
    `mcp`), or the provider's own name for a tool towline has no name for."""
    args: dict[str, Any] = Field(default_factory=dict[str, Any], exclude_if=_empty)
    """What the tool was called with, as the provider reported it (a query, code, a URL; for
    `mcp`: `server`, `tool` and its `arguments`)."""
    tool_call_id: str = Field(default="", exclude_if=_empty)
    """The provider's id of the call (its return part has the same id)."""
    provider: str
    """The provider family that ran it (`anthropic`, `openai`, `google`)."""
    provider_data: dict[str, Any] = Field(default_factory=dict[str, Any], exclude_if=_empty)
    """The provider's record of the call exactly as it came, sent back unchanged."""

    _summary_keys: ClassVar[tuple[str, ...]] = ("query", "queries", "url", "code", "command",
                                                "tool", "server")

    def __repr__(self) -> str:
        return (f"NativeToolCallPart(tool_name={self.tool_name!r}, args={native_label(self)!r}, "
                f"tool_call_id={self.tool_call_id!r}, provider={self.provider!r})")


class NativeToolReturnPart(_Frozen):
    """The result of a native tool call, as the provider reported it in the same response."""

    part_kind: Literal["native_tool_return"] = "native_tool_return"
    tool_name: str
    """The tool's name, as in its call part."""
    tool_call_id: str = Field(default="", exclude_if=_empty)
    """The id of the call it answers."""
    content: Any = Field(default=None, exclude_if=lambda v: v is None)
    """A readable form of the result: search results' titles and URLs, the code's output, the
    MCP tool's answer (the encrypted parts stay in `provider_data`)."""
    status: Literal["succeeded", "failed"] = Field(default="succeeded",
                                                   exclude_if=lambda v: v == "succeeded")
    """Whether the provider reports that the tool worked (`failed`: an error result)."""
    provider: str
    """The provider family that ran it."""
    provider_data: dict[str, Any] = Field(default_factory=dict[str, Any], exclude_if=_empty)
    """The provider's record of the result exactly as it came (encrypted content included),
    sent back unchanged."""

    def __repr__(self) -> str:
        text = repr(self.content)
        return (f"NativeToolReturnPart(tool_name={self.tool_name!r}, status={self.status!r}, "
                f"content={text[:80] + '…' if len(text) > 80 else text}, "
                f"provider={self.provider!r})")


class Suspended(_Frozen):
    """A response its provider has not finished: the step makes more requests to complete it.

    `pause_turn`: Anthropic paused a long turn of server tools; the turn is sent back as it
    is and the model goes on (the pieces are joined into one response). `background`: an
    OpenAI background response, still `queued` or `in_progress`; the run polls it by
    `response_id`, with durable timers between short activities.
    """

    reason: Literal["pause_turn", "background"]
    """Why the response is not finished."""
    provider: str
    """The provider family that holds it."""
    response_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The provider's id of the response (a background response is polled by it)."""
    status: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The provider's status of it (`queued`, `in_progress`)."""


def native_label(part: NativeToolCallPart) -> str:
    """A short readable form of a native call's arguments (`query='...'`), for lists and logs."""
    args = part.args
    shown = [(k, args[k]) for k in NativeToolCallPart._summary_keys if k in args] or list(args.items())  # pyright: ignore[reportPrivateUsage]
    text = ", ".join(f"{k}={v!r}" for k, v in shown[:2])
    return text if len(text) <= 120 else text[:119] + "…"


# --- messages -----------------------------------------------------------------------------


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
