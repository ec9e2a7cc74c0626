"""The activity side of a run's live events: the model's text, published as it arrives.

When a request's `ModelSettings.stream` is on, the model activity opens a
`TextStream` around the model call. Models report pieces of text with
`text_delta(...)` (the provider models as their SDK streams them,
`FunctionModel` for each `str` its generator yields), and pieces of thinking
with `thinking_delta(...)`; the stream gathers them and publishes each batch
(a `text` event, a `thinking` one, in the order they came) to the run's Workflow Stream
(`WorkflowStreamClient.from_within_activity`: a signal to the run, deduplicated
by the stream, so a retried signal never shows twice).

Batches are what history pays for: each is one signal (one event, plus the
workflow task it wakes). The first waits `FIRST_INTERVAL`, each next one a
little longer (`GROWTH`, up to `MAX_INTERVAL`), and a model call sends at most
`MAX_BATCHES`: past that, the rest of the text goes in the last batch, sent
when the model is done. The model's response is returned as without streaming;
streaming never fails a model call (a batch that cannot be sent is logged and
dropped, the response being the record).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Self

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from towline.events import EVENTS_TOPIC, EventType

__all__ = [
    "TextStream",
    "text_delta",
    "thinking_delta",
    "FIRST_INTERVAL",
    "GROWTH",
    "MAX_INTERVAL",
    "MAX_BATCHES",
]

FIRST_INTERVAL = 0.3
"""Seconds the first batch of a model call gathers text before it is sent."""
GROWTH = 1.25
"""Each later batch waits this much longer than the one before it."""
MAX_INTERVAL = 2.0
"""Seconds a batch waits at most."""
MAX_BATCHES = 24
"""Batches (signals, history events) one model call sends at most."""

_log = logging.getLogger("towline.streaming")
_CURRENT: ContextVar[TextStream | None] = ContextVar("towline_text_stream", default=None)


def text_delta(delta: str) -> None:
    """Report a piece of the model's text (a no-op unless the request streams)."""
    stream = _CURRENT.get()
    if stream is not None and delta:
        stream.add(delta)


def thinking_delta(delta: str) -> None:
    """Report a piece of the model's thinking (a no-op unless the request streams). It is
    published as its own event type, `thinking`, so readers show it apart from the answer."""
    stream = _CURRENT.get()
    if stream is not None and delta:
        stream.add(delta, EventType.THINKING)


class TextStream:
    """Publishes the text of one model call in bounded batches (an async context manager)."""

    def __init__(self, step: int, client: WorkflowStreamClient | None = None) -> None:
        self.step = step
        self.attempt = activity.info().attempt
        self.client = client or WorkflowStreamClient.from_within_activity()
        self.topic = self.client.topic(EVENTS_TOPIC)
        self.batches = 0
        self._pending: list[tuple[EventType, str]] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._token: Any = None
        self._sending = asyncio.Lock()

    def add(self, delta: str, kind: EventType = EventType.TEXT) -> None:
        """Buffer a piece of text (or, `EventType.THINKING`, of thinking) for the next batch."""
        self._pending.append((kind, delta))
        self._arrived.set()

    async def __aenter__(self) -> Self:
        self._token = _CURRENT.set(self)
        self._task = asyncio.create_task(self._batches())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        _CURRENT.reset(self._token)
        if self._task is not None:
            # not while a batch is on its way: a signal cut short is sent again by the next
            # flush, and history pays for both (the stream drops the copy)
            async with self._sending:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if kind is None or not issubclass(kind, asyncio.CancelledError):
            await self._send()  # the rest, before the response completes the activity

    async def _batches(self) -> None:
        interval = FIRST_INTERVAL
        while self.batches < MAX_BATCHES - 1:  # the last batch is sent when the model is done
            await self._arrived.wait()
            await asyncio.sleep(interval)
            async with self._sending:
                await self._send()
            interval = min(interval * GROWTH, MAX_INTERVAL)

    async def _send(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self._arrived.clear()
        self.batches += 1
        # one event per run of pieces of one kind, in order; one flush: one signal
        for kind, pieces in itertools.groupby(pending, key=lambda p: p[0]):
            self.topic.publish({"type": kind.value, "step": self.step, "attempt": self.attempt,
                                "delta": "".join(piece for _, piece in pieces)})
        try:
            await self.client.flush()
        except Exception as e:  # noqa: BLE001 - the response is the record; the preview may lose a piece
            _log.warning("streamed text of step %s not published: %s", self.step, e)
