"""Heartbeats: a worker lost mid-activity is noticed in seconds, not at a timeout of minutes.

Every towline activity heartbeats while it runs (async functions, sync tools in
their thread, model calls waiting on a provider), so with a heartbeat timeout
Temporal retries (or reports) an attempt whose worker died after at most that
timeout instead of the start-to-close timeout.

A non-idempotent tool also records, durably, that it is about to enter the tool
function (`mark_entered`: a heartbeat sent synchronously, acknowledged by the
server, before the function starts). A later attempt that finds no such record
knows for certain the earlier one never ran the tool, and may run it; one that
finds it knows the effect is uncertain and refuses (`UNCERTAIN`).

That record costs an RPC and a billable Action per call, so a function tool
may go without it (`Tool.entry_mark=False`): its first attempt runs at once, and any later
attempt refuses (`UNCERTAIN`), since the one before may have entered. A long call's
liveness heartbeats carry `ENTERED_KEY` anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.api.common.v1 import Payloads
from temporalio.api.workflowservice.v1 import RecordActivityTaskHeartbeatRequest

from .io import ENTERED_KEY

__all__ = [
    "with_heartbeats", "mark_entered", "entered_before", "record_now", "ENTERED_KEY",
    "UNCERTAIN",
]

UNCERTAIN = "UncertainToolEffect"
"""Error type of an attempt that refused to run because an earlier one may have taken effect."""

_T = TypeVar("_T")


def _interval() -> float:
    """A third of the activity's heartbeat timeout (30 s if it has none), within 0.2-10 s.

    Heartbeating more often than the server needs costs nothing: the SDK throttles what
    it sends to the server.
    """
    timeout = activity.info().heartbeat_timeout or timedelta(seconds=30)
    return min(max(timeout.total_seconds() / 3, 0.2), 10.0)


async def with_heartbeats(
    work: Awaitable[_T], details: Callable[[], Sequence[Any]] = tuple
) -> _T:
    """Await `work`, heartbeating `details()` often enough for the heartbeat timeout.

    While a tool computes in its thread or a provider thinks, nothing else tells
    Temporal the worker is alive. `work` is cancelled if the activity is.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_interval())
            if task in done:
                return task.result()
            activity.heartbeat(*details())
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def entered_before() -> int | None:
    """The attempt that recorded entering the tool function before this one, if any."""
    for detail in activity.info().heartbeat_details:
        if isinstance(detail, dict) and ENTERED_KEY in detail:
            value: Any = detail[ENTERED_KEY]  # pyright: ignore[reportUnknownVariableType]
            return int(value) if isinstance(value, int | float | str) else 0
    return None


async def mark_entered() -> dict[str, int]:
    """Durably record that this attempt enters the tool function; returns the detail to keep.

    A heartbeat sent as a direct RPC, so that it is on the server before the tool
    runs (the SDK's own heartbeats are sent in the background, unacknowledged).
    """
    detail = {ENTERED_KEY: activity.info().attempt}
    await record_now(detail)
    return detail


async def record_now(detail: dict[str, Any]) -> None:
    """Record `detail` as this attempt's heartbeat details on the server, acknowledged."""
    info = activity.info()
    client = activity.client()
    payloads = await client.data_converter.encode([detail])
    await client.workflow_service.record_activity_task_heartbeat(
        RecordActivityTaskHeartbeatRequest(
            task_token=info.task_token, details=Payloads(payloads=payloads),
            identity=client.identity, namespace=info.namespace,
        ),
        retry=True, timeout=timedelta(seconds=10),
    )
