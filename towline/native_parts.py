"""What a provider did on its own side within a response: its native tools' calls and results,
and a response it has not finished yet.

`NativeToolCallPart` and `NativeToolReturnPart` are `ModelResponse` parts: the provider ran
the tool (a web search, code in its container, a call to a remote MCP server) while it
answered, so the call and its result come back together, in the response, and towline
executes nothing. `provider_data` keeps the provider's own record exactly as it came (an
Anthropic `server_tool_use` or `web_search_tool_result` block with its encrypted content, a
Responses `web_search_call` item, a Gemini `executable_code` part with its thought signature):
it is what goes back to the same provider family on the next request, never to another.
`args` and `content` are readable copies for people and hooks; changing them changes
nothing sent.

`Suspended` marks a response its provider has not finished (Anthropic's `pause_turn`, an
OpenAI background response still queued or in progress): the run's step goes on with more
requests until it is complete (`ModelResponse.suspended`). Re-exported by `towline.messages`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from towline.media_parts import FrozenModel

__all__ = ["NativeToolCallPart", "NativeToolReturnPart", "Suspended", "native_label",
           "NATIVE_STATUSES"]

NATIVE_STATUSES = ("succeeded", "failed")
"""A native tool's outcome as its provider reported it."""


def _empty(value: Any) -> bool:
    return not value


class NativeToolCallPart(FrozenModel):
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


class NativeToolReturnPart(FrozenModel):
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


class Suspended(FrozenModel):
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
