"""Payload size: the one limit every activity input, result and run output must fit in.

Temporal refuses a payload over its blob size limit (2 MiB by default); a
workflow that tries fails its task again and again. towline measures before
scheduling or returning, with the converter of the side it runs on. A worker
with a payload store (`towline.storage.payload_store`) stores large payloads instead:
its limit is then the store's (`register_payload_limit`).
"""

from __future__ import annotations

from typing import Any

from temporalio.converter import PayloadConverter

__all__ = ["PAYLOAD_LIMIT", "payload_size", "payload_limit", "register_payload_limit"]

PAYLOAD_LIMIT = 2 * 1024 * 1024 - 128 * 1024
"""Bytes a payload may have: Temporal's default 2 MiB blob limit, less headroom."""

_BY_QUEUE: dict[str, int] = {}


def payload_size(converter: PayloadConverter, value: Any) -> int:
    """Bytes `value` takes as one payload."""
    return converter.to_payloads([value])[0].ByteSize()


def register_payload_limit(limit: int, task_queue: str) -> None:
    """Workers of `task_queue` store payloads up to `limit` bytes (they have a payload store)."""
    _BY_QUEUE[task_queue] = limit


def payload_limit(task_queue: str | None) -> int:
    """The payload limit of this process's workers of `task_queue` (`PAYLOAD_LIMIT` without a store).

    Read by activities for their results, and by the `towline.runtime.search_attributes` local
    activity when a run starts: the run's own limit is recorded in its history there, so
    that replaying it never depends on the replaying worker's configuration.
    """
    return _BY_QUEUE.get(task_queue or "", PAYLOAD_LIMIT)
