"""Waiting for what a run with people in the loop shows: a probe that comes true, and a number
of calls pending (`towline.review.pending`); and ending a run a test left running."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import WorkflowHandle

from towline.review import pending

__all__ = ["eventually", "waiting", "stop"]


async def eventually(probe: Callable[[], Awaitable[Any]], what: str, tries: int = 600) -> Any:
    """The first truthy value of `probe`, polled every 50 ms; `AssertionError` naming `what`
    after `tries` polls."""
    for _ in range(tries):
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"never observed: {what}")


async def waiting(handle: WorkflowHandle[Any, Any], n: int) -> list[Any]:
    """The run's pending calls, once there are `n` of them."""
    async def probe() -> list[Any] | None:
        calls = await pending(handle)
        return calls if len(calls) == n else None
    found: list[Any] = await eventually(probe, f"{n} pending calls")
    return found


async def stop(handle: WorkflowHandle[Any, Any]) -> None:
    """End a run the test left running (a wedged one, on the old code)."""
    desc = await handle.describe()
    if desc.status is not None and desc.status.name == "RUNNING":
        await handle.terminate("test over")
