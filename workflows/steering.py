"""Steering a busy session: what a `send` does while a turn is running.

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
from dataclasses import dataclass
from typing import TypeVar

from temporalio import workflow

from towline.errors import Cancelled, RunFailure, runtime_failure

__all__ = ["Interrupted", "Steering", "interruptible"]

_T = TypeVar("_T")


class Interrupted(RunFailure):
    """Internal: a `send` interrupted the model request in flight (the run asks again; never a
    run's failure reason)."""


@dataclass
class Steering:
    """What a run's handlers and its running code tell each other: one object, made by
    `AgentRun` before any handler can run and handed to the run's state (`Run.steering`)."""

    cancelled: bool = False
    """towline's `cancel` signal reached the run (it fails `Cancelled` at its next boundary)."""
    interruptible: bool = False
    """A session whose `on_busy` is `interrupt`: a `send` cancels the model request in flight."""
    model_in_flight: bool = False
    """A model request that a `send` may interrupt is in flight."""
    interrupt_requested: bool = False
    """A `send` asked to interrupt the model request in flight."""

    def check_cancelled(self) -> None:
        """Fail the run `Cancelled` if the `cancel` signal reached it (at a step boundary)."""
        if self.cancelled:
            raise runtime_failure(Cancelled("the run was cancelled"))


async def interruptible(steering: Steering, call: Callable[[], Awaitable[_T]]) -> _T:
    """`await call()`, unless a `send` interrupts it (`steering.interrupt_requested`): then the
    request is cancelled and `Interrupted` raised."""
    if not steering.interruptible:
        return await call()
    task: asyncio.Task[_T] = asyncio.ensure_future(call())
    steering.model_in_flight = True
    try:
        await workflow.wait_condition(lambda: task.done() or steering.interrupt_requested)
    finally:
        steering.model_in_flight = False
    if task.done():
        return task.result()
    steering.interrupt_requested = False
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, RunFailure):
        pass  # the activity was cancelled, as asked
    raise runtime_failure(Interrupted("a new message interrupted the model request"))
