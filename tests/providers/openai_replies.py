"""Chat Completions answers for the provider tests, in the API's exact shape."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["completion", "tool_call"]


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """One entry of `message.tool_calls` (arguments as JSON text, as the API sends them)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None, *,
               finish: str | None = None, model: str = "gpt-4.1-mini-2025-04-14",
               prompt_tokens: int = 20, completion_tokens: int = 5, cached: int = 0) -> dict[str, Any]:
    """A `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1735689600, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish or ("tool_calls" if calls else "stop")}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }
