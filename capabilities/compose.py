"""Hooks applied to plain values, for unit tests of capabilities (`towline.testing` exports them).

`run_before_model_request(caps, value)` and its siblings compose hooks in the
same order as an actual run, but enforce nothing and invent no runtime fields:
whatever the hooks return is passed on as is. They are plain calls; an async
hook is driven to completion in place, which works for any hook that awaits
nothing but other coroutines. A hook that needs a running event loop (timers,
real I/O) is for the `arun_*` twins, which are `async`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any

from .base import CapabilityLike, hook_of

__all__ = [
    "run_before_model_request",
    "run_after_model_request",
    "run_before_tool_execute",
    "run_before_tool_return",
    "run_after_tool_execute",
    "arun_before_model_request",
    "arun_after_model_request",
    "arun_before_tool_execute",
    "arun_before_tool_return",
    "arun_after_tool_execute",
]


def _drive(result: Any, hook: str) -> Any:
    """The value of a hook's result, completing a coroutine without an event loop."""
    if not inspect.isawaitable(result):
        return result
    if not inspect.iscoroutine(result):
        raise TypeError(f"{hook} returned an awaitable that is not a coroutine: use arun_{hook}")
    coro: Coroutine[Any, Any, Any] = result
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise TypeError(f"{hook} waits on the event loop: use `await arun_{hook}(...)`")


def _apply(caps: Sequence[CapabilityLike], hook: str, value: Any, *lead: Any) -> Any:
    for cap in caps:
        fn = hook_of(cap, hook)
        if fn is not None:
            value = _drive(fn(*lead, value), hook)
    return value


async def _aapply(caps: Sequence[CapabilityLike], hook: str, value: Any, *lead: Any) -> Any:
    for cap in caps:
        fn = hook_of(cap, hook)
        if fn is not None:
            result = fn(*lead, value)
            value = await result if inspect.isawaitable(result) else result
    return value


def run_before_model_request(caps: Sequence[CapabilityLike], value: Any) -> Any:
    """Apply every `before_model_request` in list order to `value`."""
    return _apply(caps, "before_model_request", value)


def run_after_model_request(caps: Sequence[CapabilityLike], value: Any) -> Any:
    """Apply every `after_model_request` in list order to `value`."""
    return _apply(caps, "after_model_request", value)


def run_before_tool_execute(caps: Sequence[CapabilityLike], ctx: Any, call: Any) -> Any:
    """Apply every `before_tool_execute` in list order to `call`."""
    return _apply(caps, "before_tool_execute", call, ctx)


def run_before_tool_return(caps: Sequence[CapabilityLike], ctx: Any, call: Any, result: Any) -> Any:
    """Apply every `before_tool_return` in list order to `result`."""
    return _apply(caps, "before_tool_return", result, ctx, call)


def run_after_tool_execute(caps: Sequence[CapabilityLike], ctx: Any, call: Any, result: Any) -> None:
    """Call every `after_tool_execute` in list order."""
    for cap in caps:
        fn = hook_of(cap, "after_tool_execute")
        if fn is not None:
            _drive(fn(ctx, call, result), "after_tool_execute")


async def arun_before_model_request(caps: Sequence[CapabilityLike], value: Any) -> Any:
    """`run_before_model_request` for hooks that need a running event loop."""
    return await _aapply(caps, "before_model_request", value)


async def arun_after_model_request(caps: Sequence[CapabilityLike], value: Any) -> Any:
    """`run_after_model_request` for hooks that need a running event loop."""
    return await _aapply(caps, "after_model_request", value)


async def arun_before_tool_execute(caps: Sequence[CapabilityLike], ctx: Any, call: Any) -> Any:
    """`run_before_tool_execute` for hooks that need a running event loop."""
    return await _aapply(caps, "before_tool_execute", call, ctx)


async def arun_before_tool_return(
    caps: Sequence[CapabilityLike], ctx: Any, call: Any, result: Any
) -> Any:
    """`run_before_tool_return` for hooks that need a running event loop."""
    return await _aapply(caps, "before_tool_return", result, ctx, call)


async def arun_after_tool_execute(
    caps: Sequence[CapabilityLike], ctx: Any, call: Any, result: Any
) -> None:
    """`run_after_tool_execute` for hooks that need a running event loop."""
    for cap in caps:
        fn = hook_of(cap, "after_tool_execute")
        if fn is not None:
            out: Any = fn(ctx, call, result)
            if inspect.isawaitable(out):
                awaited: Awaitable[Any] = out
                await awaited
