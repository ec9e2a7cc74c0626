"""The worker and history helpers of `towline.testing` (re-exported there): an in-process
worker for a test, a run's events and executions, and the replay check to keep in a suite."""


from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker

from towline.agent import Agent
from towline.client import with_towline
from towline.models import Model
from towline.replay import ReplayOutcome, load_history, replay_histories, replay_runs
from towline.results import RunInput, RunResult
from towline.storage.payload_store import PayloadStore

__all__ = [
    "towline_worker", "history_events", "execution_histories", "run_to_end", "assert_replays",
    "replay_histories", "replay_runs", "load_history", "ReplayOutcome",
]


@asynccontextmanager
async def towline_worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str | None = None,
    models: Mapping[str, Model] | None = None,
    allowed_models: Sequence[str] = (),
    deployment: WorkerDeploymentVersion | None = None,
    accept_versions: Sequence[str] = (),
    payload_store: PayloadStore | str | None = None,
    deps: Any = None,
    **worker_options: Any,
) -> AsyncGenerator[tuple[Client, str]]:
    """Run a worker for `agents` on a fresh task queue; yields (towline client, task queue).

    The yielded client shares `client`'s connection but uses towline's data converter.
    `allowed_models` are the patterns of models runs may switch to (`RunInput.model`);
    `deployment` and `accept_versions` are `TowlinePlugin`'s; `payload_store` keeps large
    payloads out of the history (`towline.storage.payload_store`); `deps` the worker-side
    dependencies handed to tools and activities (`TowlinePlugin(deps=...)`).
    """
    towline_client = with_towline(client, agents, models, allowed_models=allowed_models,
                                  deployment=deployment, accept_versions=accept_versions,
                                  payload_store=payload_store, deps=deps)
    queue = task_queue or f"tq-{uuid.uuid4().hex[:12]}"
    async with Worker(towline_client, task_queue=queue, **worker_options):
        yield towline_client, queue


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    """All events of a workflow's history."""
    history = await handle.fetch_history()
    return list(history.events)


async def execution_histories(
    client: Client, workflow_id: str, first_run_id: str | None = None
) -> list[WorkflowHistory]:
    """The history of every execution of a run, first to last, following continue-as-new.

    From `first_run_id`, or from the workflow's first execution (asked of the server).
    """
    run_id = first_run_id
    if run_id is None:
        description = await client.get_workflow_handle(workflow_id).describe()
        run_id = description.raw_description.workflow_execution_info.first_run_id or None
    found: list[WorkflowHistory] = []
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        found.append(history)
        last = history.events[-1]
        run_id = (last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                  or None)
    return found


async def run_to_end(
    client: Client, inp: RunInput, *, task_queue: str, id: str
) -> tuple[RunResult, list[list[HistoryEvent]]]:
    """Start an `AgentRun`, wait for its result, and read the events of every execution it
    went through (first to last, following continue-as-new)."""
    handle = await client.start_workflow("AgentRun", inp, id=id, task_queue=task_queue,
                                         result_type=RunResult)
    result = await handle.result()
    chain = await execution_histories(client, handle.id, handle.first_execution_run_id)
    return result, [list(h.events) for h in chain]


async def assert_replays(
    histories: Iterable[WorkflowHistory | str | Path], agents: Sequence[Agent]
) -> list[ReplayOutcome]:
    """Replay `histories` (or JSON files of them) against `agents`; AssertionError naming
    every execution that no longer replays. Returns the outcomes (versions included)."""
    loaded = [h if isinstance(h, WorkflowHistory) else load_history(Path(h)) for h in histories]
    outcomes = await replay_histories(loaded, agents)
    failed = [o.line() for o in outcomes if not o.ok]
    if failed:
        raise AssertionError("recorded runs no longer replay:\n" + "\n".join(failed))
    return outcomes
