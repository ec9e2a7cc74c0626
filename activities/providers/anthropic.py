"""`anthropic:<model>`: Anthropic's Messages API (`POST /v1/messages`).

System parts become the top-level `system` text; messages alternate `user` /
`assistant` (consecutive ones of a role are merged, tool results first, as
the API requires); tool results carry `is_error` for every status but
`succeeded`. `max_tokens` is required by the API: `default_max_tokens` fills
it when the settings leave it unset. Two pure functions around one SDK call,
ready for a streaming variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from towline.messages import (
    Message,
    ModelResponse,
    ResponsePart,
    RetryPart,
    SystemPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
)
from towline.models import ModelInfo

from ._common import (
    Endpoint,
    ProviderModel,
    connection_error,
    field_map,
    items,
    priced,
    request_timeout,
    retry_text,
    return_text,
    status_error,
)
from ._stream import stream_anthropic

__all__ = ["AnthropicModel", "build_request", "parse_response", "anthropic_error", "DEFAULT_MAX_TOKENS"]

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` sent when `ModelSettings.max_tokens` is unset (the API requires one)."""

_FINISH: dict[str, Literal["stop", "length", "tool_calls", "content_filter"]] = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "tool_use": "tool_calls",
    "max_tokens": "length", "model_context_window_exceeded": "length", "refusal": "content_filter",
}


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

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Messages API request (SDK retries off: Temporal retries)."""
        endpoint = self.endpoint()
        client = self.sdk_client(endpoint, _make_client)
        body, extra = build_request(self.model, messages, info, self.default_max_tokens)
        import anthropic

        if info.settings.stream:  # streaming
            data = await stream_anthropic(client, body, extra, endpoint)
        else:
            try:
                result = await client.messages.create(**body, extra_body=extra or None,
                                                      timeout=request_timeout())
            except anthropic.AnthropicError as e:
                raise anthropic_error(e, endpoint) from None
            data = result.model_dump(mode="json")
        response = parse_response(data, info, self.model)
        ref = response.model_name or self.model
        return response.model_copy(update={"usage": priced(response.usage, ref, self.pricing(endpoint))})


def _make_client(module: Any, endpoint: Endpoint) -> Any:
    return module.AsyncAnthropic(api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0)


def anthropic_error(e: Exception, endpoint: Endpoint) -> Exception:
    """The towline error for an Anthropic SDK error (messages scrubbed of key and endpoint)."""
    import anthropic

    if isinstance(e, anthropic.APIStatusError):
        return status_error("anthropic", e.status_code, e.body, e.response.headers, endpoint)
    if isinstance(e, anthropic.APIConnectionError):
        return connection_error("anthropic", e)
    return RuntimeError(endpoint.scrub(f"anthropic: {type(e).__name__}: {e}"))


# --- towline -> Messages API ----------------------------------------------------------------


def _blocks(m: Message) -> tuple[str, list[dict[str, Any]], list[str]]:
    """A message's role, content blocks, and system texts."""
    if isinstance(m, ModelResponse):
        blocks: list[dict[str, Any]] = [
            {"type": "text", "text": p.content} for p in m.parts if isinstance(p, TextPart) and p.content
        ]
        blocks += [{"type": "tool_use", "id": c.tool_call_id, "name": c.tool_name, "input": c.args}
                   for c in m.tool_calls]
        return "assistant", blocks, []
    blocks = []
    system: list[str] = []
    for p in m.parts:
        if isinstance(p, SystemPart):
            system.append(p.content)
        elif isinstance(p, UserPart):
            if p.content:
                blocks.append({"type": "text", "text": p.content})
        elif isinstance(p, ToolReturnPart):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": p.tool_call_id,
                                      "content": return_text(p)}
            if p.status != "succeeded":
                result["is_error"] = True
            blocks.append(result)
        elif isinstance(p, RetryPart) and p.tool_call_id:  # pyright: ignore[reportUnnecessaryIsInstance]
            blocks.append({"type": "tool_result", "tool_use_id": p.tool_call_id,
                           "content": retry_text(p), "is_error": True})
        else:
            blocks.append({"type": "text", "text": retry_text(p)})
    return "user", blocks, system


def anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating messages of a conversation."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role, blocks, texts = _blocks(m)
        system += texts
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    for message in out:  # tool results open their user turn
        if message["role"] == "user":
            content: list[dict[str, Any]] = message["content"]
            message["content"] = ([b for b in content if b["type"] == "tool_result"]
                                  + [b for b in content if b["type"] != "tool_result"])
    return "\n\n".join(system), out


def build_request(
    model: str, messages: Sequence[Message], info: ModelInfo, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's SDK arguments, and `ModelSettings.extra` (sent as extra body fields)."""
    system, conversation = anthropic_messages(messages)
    settings = info.settings
    body: dict[str, Any] = {
        "model": model, "max_tokens": settings.max_tokens or default_max_tokens,
        "messages": conversation,
    }
    if system:
        body["system"] = system
    tools = [*info.tools, *info.output_tools]
    if tools:
        body["tools"] = [
            {"name": t.name, "description": t.description,
             "input_schema": t.parameters_json_schema or {"type": "object", "properties": {}}}
            for t in tools
        ]
    # Sampling fields travel as extra body fields: newer SDKs no longer take them as
    # arguments, while the API still reads them for the models that support them.
    extra: dict[str, Any] = {}
    if settings.temperature is not None:
        extra["temperature"] = settings.temperature
    if settings.top_p is not None:
        extra["top_p"] = settings.top_p
    return body, {**extra, **settings.extra}


# --- Messages API -> towline ----------------------------------------------------------------


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A Messages API answer (JSON data) as a `ModelResponse` (usage not yet priced)."""
    parts: list[ResponsePart] = []
    outputs = {t.name for t in info.output_tools}
    for block in items(data.get("content")):
        if block.get("type") == "text" and block.get("text"):
            parts.append(TextPart(content=str(block["text"])))
        elif block.get("type") == "tool_use" and block.get("name"):
            raw_input = block.get("input")
            name = str(block["name"])
            parts.append(ToolCallPart(
                tool_name=name, args=dict(field_map(raw_input)),
                raw_args=None if isinstance(raw_input, Mapping) else repr(raw_input),
                tool_call_id=str(block.get("id") or ""),
                kind="output" if name in outputs else "function",
            ))
    reason = str(data.get("stop_reason") or "")
    finish = _FINISH.get(reason) or (
        "tool_calls" if any(isinstance(p, ToolCallPart) for p in parts) else "stop")
    raw = field_map(data.get("usage"))
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    usage = Usage(
        requests=1, input_tokens=int(raw.get("input_tokens") or 0) + read + written,
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=read, cache_write_tokens=written,
    )
    return ModelResponse(parts=parts, usage=usage, model_name=str(data.get("model") or model),
                         finish_reason=finish)
