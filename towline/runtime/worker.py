"""Workers: run `AgentRun` and the activities of a set of agents on a task queue, and the
workers of model queues that share a provider's rate limit (`towline.fleet.routing`)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from temporalio.client import Client
from temporalio.worker import Worker

from towline.activities.providers._common import ProviderModel
from towline.agent import Agent
from towline.errors import ConfigurationError
from towline.fleet.routing import ModelRoutes
from towline.models import Model
from towline.runtime.plugin import TowlinePlugin

__all__ = ["create_worker", "model_queue_workers", "fleet_workers", "Only"]

Only = Literal["models", "workflows"]
"""What a fleet worker serves: `models`: only the model queues' calls; `workflows`: only the
run's own task queue (runs, tools, and the model calls no route sends elsewhere)."""


def create_worker(
    client: Client,
    agents: Sequence[Agent],
    *,
    task_queue: str,
    models: Mapping[str, Model] | None = None,
    max_concurrent_activities: int | None = None,
    allowed_models: Sequence[str] = (),
    model_queues: ModelRoutes | None = None,
) -> Worker:
    """A worker for `agents` (the client may or may not already carry a `TowlinePlugin`).

    `model_queues`: where runs started here send their model calls; serve those queues with
    `model_queue_workers`.
    """
    plugin = TowlinePlugin(agents, dict(models or {}), allowed_models=allowed_models,
                           model_queues=model_queues)
    return Worker(
        client, task_queue=task_queue, plugins=[plugin],
        max_concurrent_activities=max_concurrent_activities,
    )


def _plugin_of(client: Client) -> TowlinePlugin | None:
    found = [p for p in client.config().get("plugins", []) if isinstance(p, TowlinePlugin)]
    return found[-1] if found else None


def model_queue_workers(
    client: Client, routes: ModelRoutes, *, models: Mapping[str, Model] | None = None,
    **options: Any,
) -> list[Worker]:
    """One worker per model queue of `routes`: the model activity alone, with the queue's
    rate limit set task-queue-wide (`max_task_queue_activities_per_second`), so the server
    dispatches at most that many calls per second to all the workers of the queue together.

    `client` may carry a `TowlinePlugin` (its models, encryption and payload store are used;
    its workflows and tools are not served here); `models` adds registered models by name.
    `options` go to each `Worker` (e.g. `max_concurrent_activities`).
    """
    own = _plugin_of(client)
    registered = {**(own.models if own else {}), **(models or {})}
    config = client.config()
    config["plugins"] = [p for p in config.get("plugins", []) if not isinstance(p, TowlinePlugin)]
    bare = Client(**config)
    _load_sdks(registered, routes)
    workers: list[Worker] = []
    for queue, rps in routes.queues().items():
        plugin = TowlinePlugin((), registered, models_only=True,
                               encryption=own.encryption if own else None,
                               payload_store=own.payload_store if own else None)
        limit = {"max_task_queue_activities_per_second": rps} if rps is not None else {}
        workers.append(Worker(bare, task_queue=queue, plugins=[plugin], **limit, **options))
    return workers


def _load_sdks(models: Mapping[str, Model], routes: ModelRoutes) -> None:
    """Import the SDKs of the routed provider models before the workers poll.

    Importing one takes a second or more; done by the first call instead, the calls the
    server dispatches meanwhile queue up behind it and then reach the provider at once, a
    burst over the queue's rate. A missing SDK is left for the call to report.
    """
    for name, model in models.items():
        if isinstance(model, ProviderModel) and any(r.matches(name) for r in routes.routes):
            with contextlib.suppress(ConfigurationError):
                model.load_sdk()


def fleet_workers(
    client: Client, *, task_queue: str, routes: ModelRoutes, only: Only | None = None,
    graceful_shutdown_timeout: timedelta = timedelta(0), **options: Any,
) -> list[Worker]:
    """The workers of one `towline worker` process: the run's task queue (unless
    `only="models"`) and each model queue of `routes` (unless `only="workflows"`).

    `client` carries the `TowlinePlugin` of the agents (`towline.client.with_towline`), built
    with `model_queues=routes` so that runs started here route their model calls.
    """
    if routes and task_queue in routes.queues():
        raise ConfigurationError(f"model queue {task_queue!r} is the runs' own task queue: give "
                                 "model calls a queue of their own (its rate limit would hold "
                                 "back every tool and workflow task too)")
    if only == "models" and not routes:
        raise ConfigurationError("a worker serving only model calls needs the model queues it "
                                 "serves (--model-queue PATTERN=QUEUE)")
    workers: list[Worker] = []
    if only != "models":
        workers.append(Worker(client, task_queue=task_queue,
                              graceful_shutdown_timeout=graceful_shutdown_timeout, **options))
    if only != "workflows":
        workers += model_queue_workers(client, routes,
                                       graceful_shutdown_timeout=graceful_shutdown_timeout)
    return workers
