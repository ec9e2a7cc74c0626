"""`openai:<model>`: OpenAI Chat Completions, and every server that speaks it.

vLLM, LM Studio, llama.cpp's server, OpenRouter, Groq and Ollama answer the
same `POST /chat/completions`; point `OPENAI_BASE_URL` (or `base_url=`) at
them. The request is built and the answer read by two pure functions
(`build_request`, `parse_response`) around one SDK call, so a streaming
variant can reuse both and only add an accumulator of deltas.

Frontier features: `ModelSettings.thinking` is `reasoning_effort`; the thinking
servers such as vLLM, DeepSeek or Ollama return (`message.reasoning_content` or
`message.reasoning`) becomes a `ThinkingPart` without signature, never sent back (the
API has no field for it); images, PDFs and audio map as `openai_media` says, and a tool
that returns them is answered with its text in the `tool` message and the files in a
user message right after the tool messages (a `tool` message holds text only); native
structured output is a strict `json_schema` response format; the run's
`prompt_cache_key` routes every step to the cache holding the previous step's prefix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from towline.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    RetryPart,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.options import Thinking
from towline.runtime.model_types import ModelInfo
from towline.tools import ToolDefinition

from ._common import (
    Endpoint,
    ProviderModel,
    field_map,
    items,
    openai_error,
    parse_args,
    request_timeout,
    retry_text,
)
from ._media import split_return
from ._stream import stream_chat
from .openai_media import chat_part
from .openai_options import json_schema_format, openai_usage, reasoning_effort, run_cache_key

__all__ = ["OpenAIChatModel", "build_request", "parse_response", "openai_error", "call_json",
           "chat_messages", "FINISH_REASONS"]

FINISH_REASONS: dict[str, FinishReason | None] = {
    "stop": None, "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls",
    "content_filter": "content_filter",
}
"""Every `finish_reason` of Chat Completions (the SDK's `Choice.finish_reason`), normalised
(None: `stop`, or `tool_calls` when the message has calls: a forced `tool_choice` ends a
real answer with calls as `stop`). A message with a `refusal` is `content_filter` whatever
its finish reason. An unknown reason (a compatible server's own) is read by the content."""


@dataclass(frozen=True)
class OpenAIChatModel(ProviderModel):
    """A model behind an OpenAI Chat Completions endpoint (`openai:<model>`).

    `OpenAIChatModel("gpt-4.1-mini")` uses `OPENAI_API_KEY` and `OPENAI_BASE_URL`
    from the worker's environment; `base_url=` and `api_key=` point it at any
    compatible server, `client=` hands it a pre-built `openai.AsyncOpenAI`.
    """

    system_role: Literal["system", "developer"] = "system"
    """The role instructions are sent with (`developer` for OpenAI's reasoning models)."""
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    """The request field `ModelSettings.max_tokens` fills (older servers know only `max_tokens`)."""

    prefix: ClassVar[str] = "openai"
    sdk: ClassVar[str] = "openai"
    extra: ClassVar[str] = "openai"
    key_env: ClassVar[str] = "OPENAI_API_KEY"
    url_env: ClassVar[str] = "OPENAI_BASE_URL"
    own_provider: ClassVar[str] = "openai"
    sends_cache_key: ClassVar[bool] = True
    """Whether `ModelSettings.prompt_cache` sends the run's `prompt_cache_key`."""

    def effort(self, thinking: Thinking | None) -> str | None:
        """The `reasoning_effort` sent for `ModelSettings.thinking` (None: the field is left out)."""
        return reasoning_effort(thinking)

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Chat Completions request (SDK retries off: Temporal retries)."""
        endpoint = self.endpoint()
        client = self.sdk_client(endpoint, self.make_client)
        key = run_cache_key(info) if self.sends_cache_key and info.settings.prompt_cache else None
        body, extra = build_request(self.model, messages, info, system_role=self.system_role,
                                    max_tokens_field=self.max_tokens_field,
                                    effort=self.effort(info.settings.thinking), cache_key=key)
        send = stream_chat if info.settings.stream else call_json  # streaming
        data = await send(client.chat.completions.create, body, extra, endpoint)
        return self.price(parse_response(data, info, self.model), endpoint)

    def make_client(self, module: Any, endpoint: Endpoint) -> Any:
        """The SDK client for `endpoint` (an `AsyncOpenAI`)."""
        return make_openai_client(module, endpoint)


def make_openai_client(module: Any, endpoint: Endpoint) -> Any:
    """An `AsyncOpenAI` for `endpoint`, with the SDK's own retries off."""
    return module.AsyncOpenAI(api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0)


async def call_json(create: Any, body: Mapping[str, Any], extra: Mapping[str, Any],
                    endpoint: Endpoint) -> dict[str, Any]:
    """Call an OpenAI SDK `create` and return the answer as JSON data (errors translated)."""
    import openai

    try:
        result = await create(**body, extra_body=dict(extra) or None, timeout=request_timeout())
    except openai.OpenAIError as e:
        raise openai_error(e, endpoint) from None
    data: dict[str, Any] = result.model_dump(mode="json")
    return data


# --- towline -> Chat Completions ----------------------------------------------------------


def _tool(t: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": t.name}
    if t.description:
        function["description"] = t.description
    function["parameters"] = t.parameters_json_schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def call_arguments(call: ToolCallPart) -> str:
    """A call's arguments as the model wrote them (raw text if it was not a JSON object)."""
    return call.raw_args if call.raw_args is not None else json.dumps(call.args, ensure_ascii=False)


def _user_content(content: str | list[Any]) -> str | list[dict[str, Any]]:
    """A prompt as Chat content: text as is, a list of text and media as content parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        else:
            parts.append(chat_part(item, "a prompt"))
    return parts


def _tool_return(p: ToolReturnPart, files: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool return as a `tool` message; the media it returned go to `files` (a user
    message sent after the tool messages, since a `tool` message holds text only)."""
    text, media = split_return(p)
    if not media:
        return {"role": "tool", "tool_call_id": p.tool_call_id, "content": text}
    names = ", ".join(m.media_type or m.kind for m in media)
    note = f"[{len(media)} file(s) returned ({names}): they follow in the next user message]"
    if not files:
        files.append({"type": "text", "text": "The files the tool calls returned:"})
    files.append({"type": "text", "text": f"From {p.tool_name} (call {p.tool_call_id}):"})
    files += [chat_part(m, "a tool return") for m in media]
    return {"role": "tool", "tool_call_id": p.tool_call_id,
            "content": f"{text}\n{note}" if text else note}


def chat_messages(messages: Sequence[Message], system_role: str) -> list[dict[str, Any]]:
    """Towline messages as Chat Completions messages (thinking is not sent: the API has no
    field for it)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            files: list[dict[str, Any]] = []
            for p in m.parts:
                answers_call = isinstance(p, ToolReturnPart) or (
                    isinstance(p, RetryPart) and bool(p.tool_call_id))
                if files and not answers_call:
                    out.append({"role": "user", "content": files})
                    files = []
                if isinstance(p, SystemPart):
                    out.append({"role": system_role, "content": p.content})
                elif isinstance(p, UserPart):
                    out.append({"role": "user", "content": _user_content(p.content)})
                elif isinstance(p, ToolReturnPart):
                    out.append(_tool_return(p, files))
                elif p.tool_call_id:
                    out.append({"role": "tool", "tool_call_id": p.tool_call_id,
                                "content": retry_text(p)})
                else:
                    out.append({"role": "user", "content": retry_text(p)})
            if files:
                out.append({"role": "user", "content": files})
            continue
        text = m.text
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if m.tool_calls:
            message["tool_calls"] = [
                {"id": c.tool_call_id, "type": "function",
                 "function": {"name": c.tool_name, "arguments": call_arguments(c)}}
                for c in m.tool_calls
            ]
        elif not text:
            message["content"] = ""
        out.append(message)
    return out


def build_request(
    model: str, messages: Sequence[Message], info: ModelInfo, *,
    system_role: str = "system", max_tokens_field: str = "max_completion_tokens",
    effort: str | None = None, cache_key: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's SDK arguments, and `ModelSettings.extra` (sent as extra body fields).

    `effort` is the `reasoning_effort` to send, `cache_key` the `prompt_cache_key` (None:
    neither is sent). Raises `unsupported_media` for a media part the API cannot take."""
    body: dict[str, Any] = {"model": model, "messages": chat_messages(messages, system_role)}
    tools = [*info.tools, *info.output_tools]
    if tools:
        body["tools"] = [_tool(t) for t in tools]
    settings = info.settings
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.max_tokens is not None:
        body[max_tokens_field] = settings.max_tokens
    if effort is not None:
        body["reasoning_effort"] = effort
    native = json_schema_format(info)
    if native is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": native}
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    return body, dict(settings.extra)


# --- Chat Completions -> towline ----------------------------------------------------------


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A Chat Completions answer (JSON data) as a `ModelResponse` (usage not yet priced)."""
    choices = items(data.get("choices"))
    message = field_map(choices[0].get("message") if choices else None)
    parts: list[ResponsePart] = []
    thinking = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(thinking, str) and thinking:
        parts.append(ThinkingPart(content=thinking, provider="openai"))
    if message.get("content"):
        parts.append(TextPart(content=str(message["content"])))
    refused = bool(message.get("refusal"))
    if refused:
        parts.append(TextPart(content=str(message["refusal"])))
    outputs = {t.name for t in info.output_tools}
    for call in items(message.get("tool_calls")):
        function = field_map(call.get("function"))
        if call.get("type", "function") != "function" or not function.get("name"):
            continue
        args, raw = parse_args(function.get("arguments"))
        name = str(function["name"])
        parts.append(ToolCallPart(tool_name=name, args=args, raw_args=raw,
                                  tool_call_id=str(call.get("id") or ""),
                                  kind="output" if name in outputs else "function"))
    reason = str(choices[0].get("finish_reason") or "") if choices else ""
    finish = FINISH_REASONS.get(reason)
    if refused:
        finish = "content_filter"
    elif finish is None:
        finish = "tool_calls" if any(isinstance(p, ToolCallPart) for p in parts) else "stop"
    details = {k: v for k, v in (("finish_reason", reason),
                                 ("refusal", str(message.get("refusal") or ""))) if v}
    return ModelResponse(parts=parts, usage=openai_usage(data.get("usage"), "prompt", "completion"),
                         model_name=str(data.get("model") or model), finish_reason=finish,
                         provider_details=details)

