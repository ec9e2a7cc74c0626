"""Priorities and tenants (docs/fleet.md, "Priorities and tenants") on the bundled dev server,
which runs with the priority matcher, fairness and one partition per task queue
(`towline.devserver.MATCHING_CONFIG`).

A backlog is made the way it happens: runs whose model calls go to a model queue
(`towline.fleet.routing`) that no worker polls yet; then one worker with a single slot takes them
one at a time, and the order it gets them is the order Temporal dispatches them.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from cli_helpers import cli_env
from readme import readme
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer, Worker

from towline import Agent
from towline.client import start_run, with_towline
from towline.fleet.routing import ModelRoutes
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput
from towline.runtime.plugin import TowlinePlugin
from towline.runtime.worker import model_queue_workers
from towline.workflows import AgentRun

dispatched: list[str] = []


def answer(messages: list[Message], info: ModelInfo) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], UserPart)
    dispatched.append(str(first.parts[0].content))
    return "ok"


agent = Agent(name="prio-agent", model=FunctionModel(answer, model_name="prio-model"))


async def test_the_run_and_its_activities_carry_priority_and_tenant(
    client: Client, target: str, namespace: str
) -> None:
    done = await readme('towline run examples.calculator:agent "What is 6 times 7?" --priority 1 '
                        "--tenant acme", env=cli_env(target, namespace))
    assert done.code == 0 and done.out.strip() == "6 times 7 is 42.", done
    workflow_id = re.search(r"Run (\S+) started", done.err)
    assert workflow_id, done.err
    events = [e async for e in client.get_workflow_handle(workflow_id[1]).fetch_history_events()]
    started = events[0].workflow_execution_started_event_attributes.priority
    assert (started.priority_key, started.fairness_key) == (1, "acme")
    scheduled = {e.activity_task_scheduled_event_attributes.activity_type.name:
                 e.activity_task_scheduled_event_attributes.priority
                 for e in events if e.HasField("activity_task_scheduled_event_attributes")}
    assert {"towline.model_request", "towline.tool.multiply"} <= set(scheduled)
    assert all((p.priority_key, p.fairness_key) == (1, "acme") for p in scheduled.values())


async def _backlog(client: Client, queue: str, runs: list[tuple[str, int | None, str | None]]
                   ) -> list[WorkflowHandle[Any, Any]]:
    """Start the runs (prompt, priority, tenant) in order; return once each waits for its model.

    A run of priority 1 is started as the `temporal` CLI or the UI would, with its priority in
    the `RunInput` only (none on the start itself): the run applies it to what it schedules."""
    handles: list[WorkflowHandle[Any, Any]] = []
    for prompt, priority, tenant in runs:
        if priority == 1:
            handles.append(await client.start_workflow(
                "AgentRun", RunInput(agent=agent.name, prompt=prompt, priority=1, tenant=tenant),
                id=f"prio-{uuid.uuid4().hex[:8]}", task_queue=queue))
        else:
            handles.append(await start_run(client, agent, prompt, task_queue=queue,
                                           priority=priority, tenant=tenant))
    async with asyncio.timeout(60):
        for h in handles:
            while not (await h.describe()).raw_description.pending_activities:
                await asyncio.sleep(0.1)
    return handles


async def _drain(client: Client, routes: ModelRoutes, handles: list[WorkflowHandle[Any, Any]]) -> list[str]:
    """Serve the model queue with one slot until every run is done; the order it took them."""
    dispatched.clear()
    (worker,) = model_queue_workers(client, routes, max_concurrent_activities=1)
    async with worker:
        await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
    return list(dispatched)


async def test_a_backlog_goes_by_priority_then_fairly_between_tenants(client: Client) -> None:
    queue = f"tq-prio-{uuid.uuid4().hex[:8]}"
    routes = ModelRoutes.parse([f"prio-*={queue}-models"])
    towline_client = with_towline(client, [agent], model_queues=routes)
    async with Worker(towline_client, task_queue=queue):
        # Started first, the low-priority runs would go first in a plain queue.
        low = [(f"low {i}", 5, None) for i in range(4)]
        high = [(f"high {i}", 1, None) for i in range(4)]
        handles = await _backlog(towline_client, queue, [*low, *high])
        order = await _drain(towline_client, routes, handles)
        assert sorted(order[:4]) == [f"high {i}" for i in range(4)], order

        # One tenant's backlog of six does not keep the other's two waiting behind it.
        big = [(f"big {i}", None, "big") for i in range(6)]
        small = [(f"small {i}", None, "small") for i in range(2)]
        order = await _drain(towline_client, routes, await _backlog(towline_client, queue, [*big, *small]))
        assert {"small 0", "small 1"} <= set(order[:4]), order

    # Where the model calls went and with which priority, as the history records them; a
    # worker with no routes at all replays the run as it ran (the routes are in its history).
    history = await handles[-1].fetch_history()
    (model,) = [e.activity_task_scheduled_event_attributes for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")]
    assert (model.task_queue.name, model.priority.priority_key) == (f"{queue}-models", 1)
    await Replayer(workflows=[AgentRun], plugins=[TowlinePlugin([agent])]).replay_workflow(history)
