"""`towline watch` on a run that has ended: its events without a worker for its agent.

A closed run's stream is read back by a worker replaying it (the stream's query); when no
worker polls its task queue, or none answers within `ENDED_WAIT`, its events are read from
its history instead (`towline.replay.events.events_from_history`), with a note saying so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from towline.cli.common import CliError, one_line
from towline.cli.runstate import agent_name, workers_polling
from towline.client import is_own_queue
from towline.events import RunEvent
from towline.replay.events import events_from_history
from towline.replay.run_history import HistoryReadError, read_run_history

__all__ = ["ENDED_WAIT", "ended_events", "events_read_back", "unreadable"]

ENDED_WAIT = 3.0
"""Seconds a worker gets to start answering for a run that has ended (its stream's query)
before its events are read from its history instead."""


async def ended_events(client: Client, desc: Any, on_event: Callable[[RunEvent], None],
                 from_offset: int) -> list[RunEvent] | None:
    """A closed run's events when no worker polls its task queue: read from its history
    (None: a worker may answer, or `--from-offset` asks for the stream's own offsets)."""
    polled = await workers_polling(client, desc.task_queue, datetime.now(UTC))
    if polled is not False or from_offset:
        return None
    return await events_read_back(client, desc, on_event)


async def events_read_back(client: Client, desc: Any,
                        on_event: Callable[[RunEvent], None]) -> list[RunEvent]:
    """A closed run's events read from its history (and a note on stderr saying so)."""
    try:
        run = await read_run_history(client, desc.id)
    except HistoryReadError as e:
        raise CliError(f"cannot read the events of run {desc.id!r} from its history: {e}") from None
    print(f"note: run {desc.id!r} has ended, and no worker for its agent answered on task queue "
          f"{desc.task_queue!r}: its events are read from its history, without the streamed "
          f"text (the whole run: towline show {desc.id})", file=sys.stderr, flush=True)
    seen = events_from_history(run)
    for event in seen:
        on_event(event)
    return seen


async def unreadable(client: Client, desc: Any, err: Exception) -> CliError:
    """Why the events of a run could not be read (a closed run needs a worker to read them)."""
    closed = desc.status is not None and desc.status != WorkflowExecutionStatus.RUNNING
    no_worker = "no poller seen" in str(err) or is_own_queue(desc.task_queue) or (
        await workers_polling(client, desc.task_queue, datetime.now(UTC)) is False)
    if closed and no_worker:
        agent = await agent_name(client, desc)
        queue = desc.task_queue
        own = (f" --task-queue {queue}; the queue was one towline run command's own, whose worker "
               "ended with it") if is_own_queue(queue) else ""
        return CliError(
            f"run {desc.id!r} has ended, and a finished run's events are read back by a worker "
            f"for its agent: none polls task queue {queue!r} (start one: towline worker "
            f"--agent MODULE:ATTR{own} for agent {agent or '...'!r}; or see the run with towline "
            f"show {desc.id})")
    return CliError(f"cannot read the events of run {desc.id!r}: {one_line(err)}")
