"""The streams of `towline serve`: a thread's workflow id, and an event stream with keep-alives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from towline.serve.agui_input import InputError

__all__ = ["thread_workflow_id", "beating"]

_MAX_ID = 1000
_T = TypeVar("_T")


def thread_workflow_id(text: str) -> str:
    """`text` (an AG-UI threadId) as a workflow id, or `InputError`."""
    if (not text.strip() or len(text) > _MAX_ID or any(ord(c) < 32 for c in text)
            or not _encodable(text)):
        raise InputError(f"threadId must be 1 to {_MAX_ID} printable characters")
    return text


def _encodable(text: str) -> bool:
    """Whether `text` is valid Unicode (JSON can carry a lone surrogate; UTF-8 cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def beating(items: AsyncIterator[_T], every: float,
                   stop: asyncio.Event) -> AsyncIterator[_T | None]:
    """`items`, with None whenever `every` seconds pass without one, until `stop` is set."""
    pending: asyncio.Future[_T] | None = None
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending, stopping}, timeout=every,
                                         return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                return
            if not done:
                yield None
                continue
            future, pending = pending, None
            try:
                item = future.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        stopping.cancel()
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
