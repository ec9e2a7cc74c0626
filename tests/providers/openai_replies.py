"""Chat Completions and Responses API answers for the provider tests, in the APIs' exact shapes."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["completion", "tool_call", "responses_answer", "message_item", "function_call_item"]


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """One entry of `message.tool_calls` (arguments as JSON text, as the API sends them)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None, *,
               finish: str | None = None, model: str = "gpt-4.1-mini-2025-04-14",
               prompt_tokens: int = 20, completion_tokens: int = 5, cached: int = 0,
               reasoning_content: str | None = None, reasoning_tokens: int | None = None,
               ) -> dict[str, Any]:
    """A `chat.completion` object; `reasoning_content` is the thinking servers such as vLLM
    and DeepSeek add to the message."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    if calls:
        message["tool_calls"] = calls
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "prompt_tokens_details": {"cached_tokens": cached}}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1735689600, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish or ("tool_calls" if calls else "stop")}],
        "usage": usage,
    }


def message_item(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    """A Responses `message` output item holding `text`."""
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A Responses `function_call` output item (item id `fc_<call_id>`)."""
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}


def responses_answer(output: list[dict[str, Any]], *, model: str = "o4-mini-2025-04-16",
                     input_tokens: int = 50, output_tokens: int = 30, reasoning_tokens: int = 0,
                     cached: int = 0) -> dict[str, Any]:
    """A Responses API `response` object."""
    return {
        "id": "resp_t", "object": "response", "created_at": 1735689600, "status": "completed",
        # the fields a real answer has besides (langchain-openai's recorded answers)
        "background": False, "billing": {"payer": "developer"}, "completed_at": 1735689600,
        "frequency_penalty": 0.0, "instructions": None, "max_output_tokens": None,
        "max_tool_calls": None, "presence_penalty": 0.0, "previous_response_id": None,
        "prompt_cache_key": None, "prompt_cache_retention": None,
        "reasoning": {"effort": None, "summary": None}, "safety_identifier": None,
        "service_tier": "default", "store": False, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "top_logprobs": 0,
        "top_p": 1.0, "truncation": "disabled", "user": None, "metadata": {},
        "model": model, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "error": None, "incomplete_details": None, "output": output,
        "usage": {"input_tokens": input_tokens,
                  "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                  "output_tokens": output_tokens,
                  "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                  "total_tokens": input_tokens + output_tokens},
    }
