"""What a model or a tool reports, checked where it is made: usage the ledger can record,
results JSON can carry, and payloads that fit.

A report that cannot be recorded fails its activity non-retryably with a typed reason
(`UsageOutOfRange`, `PayloadTooLarge`), naming the field or key, so the run fails typed with
its partial run instead of its workflow task failing forever (JSON carries infinity as null,
and a payload over the limit fails the task that records it) or a value being changed
silently (a NaN became null, a cost of 1e300 saturated the ledger).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from towline.messages import Usage
from towline.runtime.payloads import payload_limit, payload_size

from .io import TOO_LARGE, USAGE_OUT_OF_RANGE, ToolActivityResult

__all__ = ["USAGE_MAX", "check_usage", "not_json", "fit"]

USAGE_MAX = 2**53 - 1
"""The largest token count one response may report (exact as a JSON number everywhere,
the UI's JavaScript included; far past any model's window, so larger is a broken model)."""



def check_usage(usage: Usage, who: str = "the model") -> None:
    """Refuse a usage the ledger could not record: final, naming the field (no retry can fix it)."""
    for name in ("requests", "input_tokens", "output_tokens", "cache_read_tokens",
                 "cache_write_tokens", "reasoning_tokens", "unpriced_requests"):
        value = getattr(usage, name)
        if value > USAGE_MAX:
            raise ApplicationError(f"{who} reported usage.{name} = {value}, over the "
                                   f"{USAGE_MAX} one response may report", type=USAGE_OUT_OF_RANGE,
                                   non_retryable=True)
    if not math.isfinite(usage.cost) or usage.cost > USAGE_MAX / 1_000_000:
        raise ApplicationError(f"{who} reported usage.cost = {usage.cost}, not a cost one "
                               f"response may report", type=USAGE_OUT_OF_RANGE, non_retryable=True)


def not_json(content: Any) -> str | None:
    """Why a tool's content cannot be its return record (bytes that are not text, a cycle, a
    NaN, an object JSON has no form for), or None if it can."""
    try:
        json.dumps(to_jsonable_python(content), allow_nan=False)
    except (PydanticSerializationError, ValueError, TypeError) as e:
        text = str(e)
        if "Out of range float" in text:
            text = "it holds NaN or infinity"
        return f"{type(content).__name__}: {text.removeprefix('Error serializing to JSON: ')}"
    return None


def fit(result: ToolActivityResult, tool: str) -> ToolActivityResult:
    """`result`, with content too large for one payload replaced (the tool did run: report,
    don't fail); a state update too large fails the call `PayloadTooLarge`, naming its keys.

    With a payload store the limit is the store's: a large result is stored, not omitted.
    """
    converter = activity.payload_converter()
    size = payload_size(converter, result)
    limit = payload_limit(activity.info().task_queue)
    if size <= limit:
        return result
    if result.state:
        state_size = payload_size(converter, result.state)
        if state_size > limit // 2 or payload_size(converter, result.model_copy(
                update={"content": None})) > limit:
            keys = sorted(result.state, key=lambda k: -payload_size(converter, result.state[k]))  # pyright: ignore[reportOptionalSubscript]
            raise ApplicationError(
                f"tool {tool!r} returned a ToolResult.state of {state_size} bytes (key "
                f"{', '.join(map(repr, keys[:3]))}), over the {limit}-byte payload limit: "
                "keep large values out of run state (a payload store keeps them by reference)",
                type=TOO_LARGE, non_retryable=True)
    note = f"[tool result of {size} bytes exceeds the {limit}-byte payload limit; omitted]"
    return result.model_copy(update={"content": note})
