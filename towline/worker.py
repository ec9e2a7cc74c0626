"""Workers: run `AgentRun` and the activities of a set of agents on a task queue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from temporalio.client import Client
from temporalio.worker import Worker

from towline.agent import Agent
from towline.models import Model
from towline.plugin import TowlinePlugin

__all__ = ["create_worker"]


def create_worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str,
    models: Mapping[str, Model] | None = None,
    max_concurrent_activities: int | None = None,
    allowed_models: Sequence[str] = (),
) -> Worker:
    """A worker for `agents` (the client may or may not already carry a `TowlinePlugin`)."""
    plugin = TowlinePlugin(agents, dict(models or {}), allowed_models=allowed_models)
    return Worker(
        client, task_queue=task_queue, plugins=[plugin],
        max_concurrent_activities=max_concurrent_activities,
    )
