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

from datetime import timedelta
from typing import TypeVar

from temporalio.exceptions import ApplicationError

from towline.errors import ConfigurationError
from towline.runtime.model_types import ModelConnectionError, ModelHTTPError

__all__ = ["CONTEXT_LENGTH", "UNKNOWN_MODEL", "activity_error"]

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
