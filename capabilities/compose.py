"""Hooks applied to plain values, for unit tests of capabilities.

`run_before_model_request(caps, value)` and its siblings compose hooks in the
same order as an actual run, but enforce nothing and invent no runtime fields:
whatever the hooks return is passed on as is.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from .base import CapabilityLike, hook_of

__all__ = [
    "run_before_model_request",
    "run_after_model_request",
    "run_before_tool_execute",
    "run_after_tool_execute",
]


async def _apply(caps: Sequence[CapabilityLike], hook: str, value: Any, *lead: Any) -> Any:
    for cap in caps:
        fn = hook_of(cap, hook)
        if fn is None:
            continue
        result = fn(*lead, value)
        value = await result if inspect.isawaitable(result) else result
    return value


async def run_before_model_request(caps: Sequence[CapabilityLike], value: Any) -> Any:
    """Apply every `before_model_request` in list order to `value`."""
    return await _apply(caps, "before_model_request", value)


async def run_after_model_request(caps: Sequence[CapabilityLike], value: Any) -> Any:
    """Apply every `after_model_request` in list order to `value`."""
    return await _apply(caps, "after_model_request", value)


async def run_before_tool_execute(caps: Sequence[CapabilityLike], ctx: Any, call: Any) -> Any:
    """Apply every `before_tool_execute` in list order to `call`."""
    return await _apply(caps, "before_tool_execute", call, ctx)


async def run_after_tool_execute(
    caps: Sequence[CapabilityLike], ctx: Any, call: Any, result: Any
) -> None:
    """Call every `after_tool_execute` in list order."""
    for cap in caps:
        fn = hook_of(cap, "after_tool_execute")
        if fn is not None:
            out = fn(ctx, call, result)
            if inspect.isawaitable(out):
                await out
