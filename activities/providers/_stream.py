"""Streamed provider requests: the same request, answered as server-sent events.

Used when a request's `ModelSettings.stream` is on. Each function sends the
request built by its provider's `build_request` with streaming on, reports
each piece of text as it arrives (`text_delta`, which the model activity
publishes to the run's live events), and gathers the events back into the
JSON the provider's non-streamed answer would have been, so that its
`parse_response` reads it unchanged: the run's history is the same whether
the request streamed or not.

- Chat Completions: `stream=True` with `stream_options.include_usage`; the
  chunks' content and tool-call deltas (by index) are joined, and their
  `reasoning_content` (or `reasoning`) deltas are the thinking (`thinking_delta`).
- Responses API: `stream=True`; `response.output_text.delta` events are the
  text, `response.reasoning_summary_text.delta` the thinking, and
  `response.completed` (or `.incomplete`, `.failed`) carries the whole response
  (reasoning items included), read as a non-streamed answer is.
- Anthropic Messages: the SDK's own `messages.stream()` helper, which gathers
  the final message (its `thinking_delta` events are the thinking, and a
  `signature_delta` completes a thinking block); an `error` event mid-stream
  (the HTTP status was 200 already) is reported with the status its error type
  stands for, so an `overloaded_error` is retried like an HTTP 529. On Bedrock
  the SDK reads AWS's event stream, and an exception message mid-stream comes
  as the same `error` event named by its exception type: a `throttlingException`
  is retried like a 429, a `validationException` is final like a 400.

A stream that ends before its last event (no finish reason, no completed
response, no stop reason) is a dropped connection: Temporal retries the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from towline.activities.streaming import text_delta, thinking_delta
from towline.runtime.model_types import ModelConnectionError

from ._common import (
    Endpoint,
    anthropic_error,
    field_map,
    items,
    openai_error,
    request_timeout,
    status_error,
)
from .openai_options import RETRIED_ERRORS

__all__ = ["stream_chat", "stream_responses", "stream_anthropic", "ANTHROPIC_ERROR_STATUS",
           "BEDROCK_ERROR_STATUS"]

ANTHROPIC_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
    "api_error": 500, "overloaded_error": 529,
}
"""The HTTP status an Anthropic error type stands for (for errors sent mid-stream)."""

BEDROCK_ERROR_STATUS: dict[str, int] = {
    "validationException": 400, "modelTimeoutException": 408, "throttlingException": 429,
    "internalServerException": 500, "serviceUnavailableException": 503,
    # Bedrock's model says 424, but AWS's guidance for it is to retry: the model behind
    # Bedrock failed mid-answer, as a gateway's upstream does (502), not the request.
    "modelStreamErrorException": 502,
}
"""The HTTP status a Bedrock `ResponseStream` exception stands for (sent mid-stream, after the
200 status line; the statuses of the `bedrock-runtime` service model)."""


async def stream_chat(create: Any, body: Mapping[str, Any], extra: Mapping[str, Any],
                      endpoint: Endpoint) -> dict[str, Any]:
    """A streamed Chat Completions request, gathered into a `chat.completion` object."""
    import openai

    content: list[str] = []
    refusal: list[str] = []
    thinking: list[str] = []  # `reasoning_content` (vLLM, DeepSeek) or `reasoning` (Ollama)
    calls: dict[int, dict[str, Any]] = {}
    answer: dict[str, Any] = {"object": "chat.completion", "choices": []}
    finish: Any = None
    try:
        chunks = await create(**body, stream=True, stream_options={"include_usage": True},
                              extra_body=dict(extra) or None, timeout=request_timeout())
        async for chunk in chunks:
            data: dict[str, Any] = chunk.model_dump(mode="json")
            for key in ("id", "model", "created", "system_fingerprint"):
                if data.get(key):
                    answer[key] = data[key]
            if data.get("usage"):
                answer["usage"] = data["usage"]
            for choice in items(data.get("choices")):
                delta = field_map(choice.get("delta"))
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if isinstance(reasoning, str) and reasoning:
                    thinking.append(reasoning)
                    thinking_delta(reasoning)
                if delta.get("content"):
                    content.append(str(delta["content"]))
                    text_delta(str(delta["content"]))
                if delta.get("refusal"):
                    refusal.append(str(delta["refusal"]))
                for call in items(delta.get("tool_calls")):
                    _add_call(calls, call)
                finish = choice.get("finish_reason") or finish
    except openai.OpenAIError as e:
        raise openai_error(e, endpoint) from None
    if finish is None:  # the connection ended cleanly, but the answer did not
        raise _cut_off("openai")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None,
                               "refusal": "".join(refusal) or None}
    if thinking:
        message["reasoning_content"] = "".join(thinking)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    answer["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return answer


def _add_call(calls: dict[int, dict[str, Any]], delta: Mapping[str, Any]) -> None:
    """Fold one tool-call delta into the call it continues (by `index`)."""
    index = int(delta.get("index") or 0)
    call = calls.setdefault(index, {"id": "", "type": "function",
                                    "function": {"name": "", "arguments": ""}})
    if delta.get("id"):
        call["id"] = str(delta["id"])
    if delta.get("type"):
        call["type"] = str(delta["type"])
    function = field_map(delta.get("function"))
    if function.get("name"):
        call["function"]["name"] += str(function["name"])
    if function.get("arguments"):
        call["function"]["arguments"] += str(function["arguments"])


async def stream_responses(create: Any, body: Mapping[str, Any], extra: Mapping[str, Any],
                           endpoint: Endpoint) -> dict[str, Any]:
    """A streamed Responses API request: its `response.completed` response."""
    import openai

    final: dict[str, Any] | None = None
    try:
        events = await create(**body, stream=True, extra_body=dict(extra) or None,
                              timeout=request_timeout())
        async for event in events:
            data: dict[str, Any] = event.model_dump(mode="json")
            kind = data.get("type")
            if kind == "response.output_text.delta" and data.get("delta"):
                text_delta(str(data["delta"]))
            elif kind == "response.reasoning_summary_text.delta" and data.get("delta"):
                thinking_delta(str(data["delta"]))
            elif kind == "response.reasoning_summary_part.added" and data.get("summary_index"):
                thinking_delta("\n\n")  # summary parts are joined by a blank line
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                final = dict(field_map(data.get("response")))  # a failure: parse_response's
            elif kind == "error":
                message = str(data.get("message") or "the response failed")
                raise status_error("openai", RETRIED_ERRORS.get(str(data.get("code")), 400),
                                   {"error": {"message": message, "code": data.get("code")}},
                                   None, endpoint)
    except openai.OpenAIError as e:
        raise openai_error(e, endpoint) from None
    if final is None:
        raise _cut_off("openai")
    return final


async def stream_anthropic(client: Any, body: Mapping[str, Any], extra: Mapping[str, Any],
                           endpoint: Endpoint, provider: str = "anthropic", *,
                           headers: Mapping[str, str] | None = None,
                           beta: bool = False) -> dict[str, Any]:
    """A streamed Messages API request, gathered by the SDK into the final `message`
    (thinking blocks with the signature their `signature_delta` brought); the thinking
    text is reported as it arrives too (`thinking_delta`), apart from the answer's. `headers`
    are extra HTTP headers (a server tool's beta); `beta` streams through the SDK's beta
    client, whose types know the MCP connector's blocks."""
    import anthropic

    try:
        messages = client.beta.messages if beta else client.messages
        async with messages.stream(**body, extra_body=dict(extra) or None,
                                   extra_headers=dict(headers or {}) or None,
                                   timeout=request_timeout()) as stream:
            async for event in stream:
                if event.type == "text" and event.text:
                    text_delta(str(event.text))
                elif event.type == "thinking" and event.thinking:
                    thinking_delta(str(event.thinking))
            final = await stream.get_final_message()
    except anthropic.APIStatusError as e:
        if e.status_code < 400:  # an `error` event after the 200 status line
            kind = str(field_map(field_map(e.body).get("error")).get("type") or "")
            status = ANTHROPIC_ERROR_STATUS.get(kind) or BEDROCK_ERROR_STATUS.get(kind, 500)
            raise status_error(provider, status, e.body, None, endpoint) from None
        raise anthropic_error(e, endpoint, provider) from None
    except anthropic.AnthropicError as e:
        raise anthropic_error(e, endpoint, provider) from None
    data: dict[str, Any] = final.model_dump(mode="json")
    if not data.get("stop_reason"):
        raise _cut_off(provider)
    return data


def _cut_off(provider: str) -> ModelConnectionError:
    """A stream that ended before its last event: retried, like a dropped connection."""
    return ModelConnectionError(f"{provider}: the stream ended before the answer was complete")
