"""Steering a busy session (engine 4): what a `send` does while a turn is running.

`RunInput.on_busy` says: `queue` (the default) — the message waits its turn: the current
turn finishes without it, and the message is then answered in a turn of its own; `interrupt`
— the model request in flight is cancelled (Temporal's activity cancellation) and the run asks
again with the message included; tool calls already running finish (or are recorded
`unknown`), never dropped, and the message joins the next request; `reject` — the `send` is
refused, telling the sender the run is busy. A run that is not a session takes a message at
its next model request whatever it says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow

from towline.errors import RunFailure, runtime_failure

__all__ = ["Interrupted", "interruptible"]

_T = TypeVar("_T")


class Interrupted(RunFailure):
    """Internal: a `send` interrupted the model request in flight (the run asks again; never a
    run's failure reason)."""


async def interruptible(call: Callable[[], Awaitable[_T]]) -> _T:
    """`await call()`, unless the run interrupts it (`AgentRun.interrupt_requested`): then the
    request is cancelled and `Interrupted` raised."""
    run: Any = workflow.instance()
    if not getattr(run, "interruptible", False):
        return await call()
    task: asyncio.Task[_T] = asyncio.ensure_future(call())
    run.model_in_flight = True
    try:
        await workflow.wait_condition(lambda: task.done() or run.interrupt_requested)
    finally:
        run.model_in_flight = False
    if task.done():
        return task.result()
    run.interrupt_requested = False
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, RunFailure):
        pass  # the activity was cancelled, as asked
    raise runtime_failure(Interrupted("a new message interrupted the model request"))
