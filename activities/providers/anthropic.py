"""`anthropic:<model>`: Anthropic's Messages API (`POST /v1/messages`).

The request is built by `anthropic_wire.build_request` (messages, media,
thinking, cache breakpoints, native output); this module sends it through the
SDK, streamed or not, and reads the answer back: text, tool calls, and
`thinking` / `redacted_thinking` blocks as `ThinkingPart`s (with their
signature) in the order they came, and server tools' blocks as native tool parts
(`anthropic_native`; a request with native tools reads the raw JSON, so their encrypted
content is kept byte for byte). `pause_turn` is a `Suspended` response: the run
continues the turn. `max_tokens` is required by the API:
`default_max_tokens` fills it when the settings leave it unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from towline.messages import (
    FinishReason,
    Message,
    ModelResponse,
    ResponsePart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)
from towline.runtime.model_types import ModelInfo

from ._common import (
    Endpoint,
    ProviderModel,
    field_map,
    items,
    raw_json,
    request_timeout,
)
from ._sdk_errors import anthropic_error
from ._stream import stream_anthropic
from .anthropic_native import native_request, paused, server_part, server_usage, text_part
from .anthropic_wire import DEFAULT_MAX_TOKENS, FAMILY, build_request

__all__ = ["AnthropicModel", "build_request", "parse_response", "anthropic_error", "DEFAULT_MAX_TOKENS",
           "STOP_REASONS", "PAUSED"]

STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
    "max_tokens": "length", "model_context_window_exceeded": "length",
    "refusal": "content_filter",  # the API's classifiers stopped the answer: `ContentFiltered`
    "pause_turn": "stop",  # see PAUSED
}
"""Every `stop_reason` of the Messages API (the SDK's `StopReason`), normalised. An unknown
one is read by the answer's content; `provider_details["stop_reason"]` keeps it as it came."""

PAUSED = frozenset({"pause_turn"})
"""Stop reasons of a turn the API paused (a long server-tool turn), not ended: the answer
goes back as the assistant turn of the next request of the same step to go on: such an
answer is `Suspended` (`anthropic_native.paused`) and the run continues it
(`workflows/suspended.py`, engine 4); an older engine reads it as `stop`."""


@dataclass(frozen=True)
class AnthropicModel(ProviderModel):
    """A Claude model behind Anthropic's Messages API (`anthropic:<model>`).

    Uses `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` from the worker's
    environment unless `api_key=` / `base_url=` / `client=` say otherwise.
    """

    default_max_tokens: int = DEFAULT_MAX_TOKENS
    """`max_tokens` when `ModelSettings.max_tokens` is unset."""

    prefix: ClassVar[str] = "anthropic"
    sdk: ClassVar[str] = "anthropic"
    extra: ClassVar[str] = "anthropic"
    key_env: ClassVar[str] = "ANTHROPIC_API_KEY"
    url_env: ClassVar[str] = "ANTHROPIC_BASE_URL"
    own_provider: ClassVar[str] = "anthropic"
    native_family: ClassVar[str] = "anthropic"

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Messages API request (SDK retries off: Temporal retries)."""
        body, extra = build_request(self.model, messages, info, self.default_max_tokens)
        native = native_request(self.name, info.native_tools, messages)  # may refuse: first
        native.apply(body, extra)
        endpoint, client = self.connect()
        import anthropic

        if info.settings.stream:  # streaming
            data = await stream_anthropic(client, body, extra, endpoint, self.prefix,
                                          headers=native.headers, beta=bool(native.mcp_servers))
        else:
            try:
                if info.native_tools:  # the blocks exactly as they came: the raw JSON
                    data = await raw_json(
                        client.messages.with_raw_response.create, **body,
                        extra_body=extra or None, extra_headers=native.headers or None,
                        timeout=request_timeout())
                else:
                    result = await client.messages.create(**body, extra_body=extra or None,
                                                          timeout=request_timeout())
                    data = result.model_dump(mode="json")
            except anthropic.AnthropicError as e:
                raise anthropic_error(e, endpoint, self.prefix) from None
        return self.price(parse_response(data, info, self.model), endpoint)

    def connect(self) -> tuple[Endpoint, Any]:
        """The endpoint and the SDK client (one per worker, endpoint and event loop)."""
        endpoint = self.endpoint()
        return endpoint, self.sdk_client(endpoint, _make_client)


def _make_client(module: Any, endpoint: Endpoint) -> Any:
    return module.AsyncAnthropic(api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0)


# --- Messages API -> towline ----------------------------------------------------------------


def _part(block: Mapping[str, Any], outputs: set[str], container: str | None) -> ResponsePart | None:
    """One content block as a part (None for a block towline does not keep)."""
    kind = block.get("type")
    if kind == "text" and block.get("text"):
        return text_part(block)
    if kind == "thinking":
        return ThinkingPart(content=str(block.get("thinking") or ""),
                            signature=str(block.get("signature") or "") or None, provider=FAMILY)
    if kind == "redacted_thinking" and block.get("data"):
        return ThinkingPart(signature=str(block["data"]), redacted=True, provider=FAMILY)
    if kind == "tool_use" and block.get("name"):
        raw_input = block.get("input")
        name = str(block["name"])
        return ToolCallPart(
            tool_name=name, args=dict(field_map(raw_input)),
            raw_args=None if isinstance(raw_input, Mapping) else repr(raw_input),
            tool_call_id=str(block.get("id") or ""),
            kind="output" if name in outputs else "function",
        )
    return server_part(block, container)


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A Messages API answer (JSON data) as a `ModelResponse` (usage not yet priced)."""
    outputs = {t.name for t in info.output_tools}
    container = str(field_map(data.get("container")).get("id") or "") or None
    parts = [p for p in (_part(b, outputs, container) for b in items(data.get("content")))
             if p is not None]
    reason = str(data.get("stop_reason") or "")
    finish = STOP_REASONS.get(reason) or (
        "tool_calls" if any(isinstance(p, ToolCallPart) for p in parts) else "stop")
    raw = field_map(data.get("usage"))
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    # The API counts thinking in output_tokens without reporting it apart: reasoning_tokens
    # stays 0 rather than an estimate.
    usage = Usage(
        requests=1, input_tokens=int(raw.get("input_tokens") or 0) + read + written,
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=read, cache_write_tokens=written,
        native_tool_uses=server_usage(data, parts),
    )
    return ModelResponse(parts=parts, usage=usage, model_name=str(data.get("model") or model),
                         finish_reason=finish, suspended=paused(data) if reason in PAUSED else None,
                         provider_details={"stop_reason": reason} if reason else {})
