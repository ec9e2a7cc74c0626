"""`openai-responses:<model>`: OpenAI's Responses API (`POST /responses`).

Stateless: every request carries the whole conversation as input items and
`store` is off, since the run's history is the record (a provider-side copy
would only be a second one). Like the Chat Completions module, two pure
functions around one SDK call, ready for a streaming variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from towline.messages import (
    Message,
    ModelRequest,
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

from ._common import ProviderModel, field_map, items, parse_args, priced, retry_text, return_text
from ._stream import stream_responses
from .openai_chat import call_arguments, call_json, make_openai_client

__all__ = ["OpenAIResponsesModel", "build_request", "parse_response"]


@dataclass(frozen=True)
class OpenAIResponsesModel(ProviderModel):
    """A model behind OpenAI's Responses API (`openai-responses:<model>`).

    Same credentials and endpoint as `OpenAIChatModel` (`OPENAI_API_KEY`,
    `OPENAI_BASE_URL`); instructions are sent as `developer` messages.
    """

    prefix: ClassVar[str] = "openai-responses"
    sdk: ClassVar[str] = "openai"
    extra: ClassVar[str] = "openai"
    key_env: ClassVar[str] = "OPENAI_API_KEY"
    url_env: ClassVar[str] = "OPENAI_BASE_URL"
    own_provider: ClassVar[str] = "openai"

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Responses API request (SDK retries off: Temporal retries)."""
        endpoint = self.endpoint()
        client = self.sdk_client(endpoint, make_openai_client)
        body, extra = build_request(self.model, messages, info)
        send = stream_responses if info.settings.stream else call_json  # streaming
        data = await send(client.responses.create, body, extra, endpoint)
        response = parse_response(data, info, self.model)
        ref = response.model_name or self.model
        return response.model_copy(update={"usage": priced(response.usage, ref, self.pricing(endpoint))})


def input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Towline messages as Responses API input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, SystemPart):
                    items.append({"role": "developer", "content": p.content})
                elif isinstance(p, UserPart):
                    items.append({"role": "user", "content": p.content})
                elif isinstance(p, ToolReturnPart):
                    items.append({"type": "function_call_output", "call_id": p.tool_call_id,
                                  "output": return_text(p)})
                elif isinstance(p, RetryPart) and p.tool_call_id:  # pyright: ignore[reportUnnecessaryIsInstance]
                    items.append({"type": "function_call_output", "call_id": p.tool_call_id,
                                  "output": retry_text(p)})
                else:
                    items.append({"role": "user", "content": retry_text(p)})
            continue
        if m.text:
            items.append({"role": "assistant", "content": m.text})
        for c in m.tool_calls:
            items.append({"type": "function_call", "call_id": c.tool_call_id, "name": c.tool_name,
                          "arguments": call_arguments(c)})
    return items


def build_request(model: str, messages: Sequence[Message], info: ModelInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's SDK arguments, and `ModelSettings.extra` (sent as extra body fields)."""
    body: dict[str, Any] = {"model": model, "input": input_items(messages), "store": False}
    tools = [*info.tools, *info.output_tools]
    if tools:
        body["tools"] = [
            {"type": "function", "name": t.name, "description": t.description,
             "parameters": t.parameters_json_schema or {"type": "object", "properties": {}},
             "strict": False}
            for t in tools
        ]
    settings = info.settings
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.max_tokens is not None:
        body["max_output_tokens"] = settings.max_tokens
    return body, dict(settings.extra)


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A Responses API answer (JSON data) as a `ModelResponse` (usage not yet priced)."""
    parts: list[ResponsePart] = []
    refused = False
    outputs = {t.name for t in info.output_tools}
    for item in items(data.get("output")):
        kind = item.get("type")
        if kind == "message":
            for content in items(item.get("content")):
                if content.get("type") == "output_text" and content.get("text"):
                    parts.append(TextPart(content=str(content["text"])))
                elif content.get("type") == "refusal":
                    refused = True
                    parts.append(TextPart(content=str(content.get("refusal") or "")))
        elif kind == "function_call" and item.get("name"):
            args, raw = parse_args(item.get("arguments"))
            name = str(item["name"])
            parts.append(ToolCallPart(tool_name=name, args=args, raw_args=raw,
                                      tool_call_id=str(item.get("call_id") or ""),
                                      kind="output" if name in outputs else "function"))
    finish: Literal["stop", "length", "tool_calls", "content_filter"]
    incomplete = field_map(data.get("incomplete_details"))
    if data.get("status") == "incomplete" and incomplete.get("reason") == "max_output_tokens":
        finish = "length"
    elif refused or incomplete.get("reason") == "content_filter":
        finish = "content_filter"
    elif any(isinstance(p, ToolCallPart) for p in parts):
        finish = "tool_calls"
    else:
        finish = "stop"
    raw_usage = field_map(data.get("usage"))
    details = field_map(raw_usage.get("input_tokens_details"))
    usage = Usage(
        requests=1, input_tokens=int(raw_usage.get("input_tokens") or 0),
        output_tokens=int(raw_usage.get("output_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
        cache_write_tokens=int(details.get("cache_write_tokens") or 0),
    )
    return ModelResponse(parts=parts, usage=usage, model_name=str(data.get("model") or model),
                         finish_reason=finish)
