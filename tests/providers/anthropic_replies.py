"""Messages API answers for the provider tests, in the API's exact shape."""

from __future__ import annotations

from typing import Any

__all__ = ["message"]


def message(content: list[dict[str, Any]], stop: str = "end_turn", *, model: str = "claude-sonnet-4-6",
            input_tokens: int = 10, output_tokens: int = 5, cache_read: int = 0,
            cache_creation: int = 0) -> dict[str, Any]:
    """A Messages API `message` object (the API reports both cache counts, zero or not, the
    cache writes by lifetime, the service tier and the inference region, as real ones do)."""
    return {"id": "msg_t", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "cache_creation_input_tokens": cache_creation,
                      "cache_read_input_tokens": cache_read,
                      # as real answers report them (langchain-anthropic's recorded ones)
                      "cache_creation": {"ephemeral_5m_input_tokens": cache_creation,
                                         "ephemeral_1h_input_tokens": 0},
                      "service_tier": "standard", "inference_geo": "not_available"}}
