"""What the OpenAI APIs (Chat Completions and Responses) share besides messages: the
reasoning effort `ModelSettings.thinking` stands for, the run's `prompt_cache_key`, the
JSON-schema response format of native structured output, and how usage is read.

Pure functions, except `run_cache_key`, which reads the activity's workflow id.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from temporalio import activity

from towline.messages import Usage
from towline.options import Thinking
from towline.runtime.model_types import ModelInfo
from towline.runtime.output_schema import strict_schema

from ._common import field_map

__all__ = ["EFFORT_BUDGETS", "reasoning_effort", "thinks", "cache_key", "run_cache_key",
           "json_schema_format", "openai_usage", "RETRIED_ERRORS"]

RETRIED_ERRORS: dict[str, int] = {"server_error": 500, "rate_limit_exceeded": 429,
                                  "vector_store_timeout": 504}
"""The Responses API's error codes (a `failed` response's `error.code`, an `error` stream event's
`code`) that Temporal retries, as the HTTP status each stands for; every other code fails the
request for good (HTTP 400)."""

EFFORT_BUDGETS: dict[str, int] = {"low": 1024, "medium": 8192, "high": 24576}
"""The thinking budget each effort stands for (the equivalence Google documents for the
OpenAI-compatible endpoint of its thinking models). An int `ModelSettings.thinking` is sent
as the effort whose budget is nearest to it by ratio: up to ~2.9k tokens `low`, up to ~14k
`medium`, above that `high`."""

_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def reasoning_effort(thinking: Thinking | None) -> str | None:
    """The `reasoning_effort` / `reasoning.effort` for `ModelSettings.thinking`, or None to send
    none (the model's default).

    `False` is `"none"`: the API's value for no reasoning (gpt-5.1 and later; an older
    reasoning model refuses it with a 400 naming the value, since it cannot switch reasoning
    off). `True` is `"medium"`, the API's own default effort. An effort is sent as given."""
    if thinking is None:
        return None
    if thinking is False:
        return "none"
    if thinking is True:
        return "medium"
    if isinstance(thinking, str):
        return thinking
    budget = max(int(thinking), 1)
    return min(EFFORT_BUDGETS, key=lambda effort: abs(math.log(budget / EFFORT_BUDGETS[effort])))


def thinks(thinking: Thinking | None) -> bool:
    """Whether the settings ask the model to think (an effort other than off)."""
    return thinking is not None and thinking is not False


def cache_key(*parts: str) -> str:
    """A short stable key from `parts` (a `prompt_cache_key`)."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def run_cache_key(info: ModelInfo) -> str:
    """The run's `prompt_cache_key`: the agent and the workflow id, hashed. Every request of
    a run shares it, so each step is routed to the cache that holds the previous step's prefix;
    outside an activity (a direct call) the agent alone names it."""
    try:
        workflow_id = activity.info().workflow_id or ""
    except RuntimeError:
        workflow_id = ""
    return cache_key(info.agent or info.model_name, workflow_id)


def json_schema_format(info: ModelInfo) -> dict[str, Any] | None:
    """Native structured output's format, `{"name", "schema", "strict": True}` with the
    output's strict schema (closed objects, every property required), or None in other modes."""
    if info.output_mode != "native" or info.output_schema is None:
        return None
    schema = strict_schema(info.output_schema)
    title = schema.get("title")
    name = _NAME.sub("_", title)[:64] if isinstance(title, str) and title else "output"
    return {"name": name, "schema": schema, "strict": True}


def openai_usage(value: Any, prompt: str, completion: str) -> Usage:
    """A `usage` object of either API, whose counts are `<prompt>_tokens` and
    `<completion>_tokens` with their `_details` (Chat Completions: `prompt` / `completion`,
    Responses: `input` / `output`): cached and cache-written input tokens, and reasoning
    tokens (part of the output tokens)."""
    raw = field_map(value)
    sent = field_map(raw.get(f"{prompt}_tokens_details"))
    made = field_map(raw.get(f"{completion}_tokens_details"))
    return Usage(
        requests=1, input_tokens=int(raw.get(f"{prompt}_tokens") or 0),
        output_tokens=int(raw.get(f"{completion}_tokens") or 0),
        cache_read_tokens=int(sent.get("cached_tokens") or 0),
        cache_write_tokens=int(sent.get("cache_write_tokens") or 0),
        reasoning_tokens=int(made.get("reasoning_tokens") or 0),
    )
