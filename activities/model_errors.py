"""How a model's failure becomes a Temporal activity failure, and the heartbeat while it waits.

Temporal owns every retry (provider SDK retries are off): an HTTP 408, 409,
429 or 5xx and an unreachable endpoint are retried by the model's retry
policy, after the provider's `Retry-After` when it sent one
(`next_retry_delay`); other 4xx are final (`ModelRequestFailed`); a context
window overflow is final with its own type, which the workflow turns into
`ContextLengthExceeded`; a model that is not configured on this worker (no
SDK, no API key) is final too. Messages never carry credentials or endpoints:
provider code builds them from the provider's error message alone, and the
original exception is not chained (`from None`), since Temporal records the
cause chain in the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from towline.errors import ConfigurationError
from towline.models import ModelConnectionError, ModelHTTPError

__all__ = ["CONTEXT_LENGTH", "UNKNOWN_MODEL", "activity_error", "heartbeating"]

CONTEXT_LENGTH = "ContextLengthExceeded"
"""Activity failure type of a request too long for the model's context window."""
UNKNOWN_MODEL = "UnknownModel"
"""Activity failure type of a model this worker cannot run (unknown, SDK or key missing)."""

T = TypeVar("T")


def activity_error(e: Exception) -> Exception:
    """The exception the model activity raises for a model's failure `e`."""
    if isinstance(e, ModelHTTPError):
        if e.context_overflow:
            return ApplicationError(str(e), type=CONTEXT_LENGTH, non_retryable=True)
        delay = timedelta(seconds=e.retry_after) if e.retry_after is not None else None
        return ApplicationError(
            str(e), type=f"HTTP{e.status}", non_retryable=not e.retryable, next_retry_delay=delay,
        )
    if isinstance(e, ModelConnectionError):
        return ApplicationError(str(e), type="ModelConnectionError")
    if isinstance(e, ConfigurationError):
        return ApplicationError(str(e), type=UNKNOWN_MODEL, non_retryable=True)
    return e


async def heartbeating(call: Awaitable[T], every: float | None = None) -> T:
    """Await `call`, heartbeating every `every` seconds (a third of the heartbeat timeout).

    While a provider thinks, nothing else would tell Temporal the worker is alive:
    with a heartbeat timeout of seconds, a worker that dies mid-request is noticed
    in seconds instead of after the start-to-close timeout (minutes).
    """
    if every is None:
        timeout = activity.info().heartbeat_timeout
        every = timeout.total_seconds() / 3 if timeout else 5.0
    task = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=max(every, 0.05))
            if task in done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()
