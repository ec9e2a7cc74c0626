"""Payload size: the one limit every activity input, result and run output must fit in.

Temporal refuses a payload over its blob size limit (2 MiB by default); a
workflow that tries fails its task again and again. towline measures before
scheduling or returning, with the converter of the side it runs on.
"""

from __future__ import annotations

from typing import Any

from temporalio.converter import PayloadConverter

__all__ = ["PAYLOAD_LIMIT", "payload_size"]

PAYLOAD_LIMIT = 2 * 1024 * 1024 - 128 * 1024
"""Bytes a payload may have: Temporal's default 2 MiB blob limit, less headroom."""


def payload_size(converter: PayloadConverter, value: Any) -> int:
    """Bytes `value` takes as one payload."""
    return converter.to_payloads([value])[0].ByteSize()
