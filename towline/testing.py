"""Helpers for testing agents against a real Temporal server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from towline.agent import Agent
from towline.client import with_towline
from towline.models import Model

__all__ = ["towline_worker", "history_events"]


@asynccontextmanager
async def towline_worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str | None = None,
    models: Mapping[str, Model] | None = None,
    allowed_models: Sequence[str] = (),
    **worker_options: Any,
) -> AsyncGenerator[tuple[Client, str]]:
    """Run a worker for `agents` on a fresh task queue; yields (towline client, task queue).

    The yielded client shares `client`'s connection but uses towline's data converter.
    `allowed_models` are the patterns of models runs may switch to (`RunInput.model`).
    """
    towline_client = with_towline(client, agents, models, allowed_models=allowed_models)
    queue = task_queue or f"tq-{uuid.uuid4().hex[:12]}"
    async with Worker(towline_client, task_queue=queue, **worker_options):
        yield towline_client, queue


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    """All events of a workflow's history."""
    history = await handle.fetch_history()
    return list(history.events)
