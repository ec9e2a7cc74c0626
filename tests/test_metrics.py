"""Metrics in real runs: Temporal's runtime metrics and towline's, on one Prometheus endpoint.

The worker's client uses a Temporal `Runtime` with a Prometheus endpoint on a free
loopback port (`towline.telemetry.metrics.prometheus_runtime`); the tests scrape its text.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from obs_helpers import metric_value, scrape, traced_agent
from ports import free_port
from temporalio.client import Client
from temporalio.worker import Worker

from towline import Agent, Limits, TowlinePlugin
from towline.capabilities import ToolApproval
from towline.client import run, start_run
from towline.errors import RunError
from towline.telemetry.metrics import METRICS, prometheus_runtime
from towline.workflows import ApprovalDecision


@dataclass
class Metered:
    client: Client
    port: int


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def metered(target: str, namespace: str) -> AsyncIterator[Metered]:
    port = free_port()
    runtime = prometheus_runtime(port)
    client = await Client.connect(target, namespace=namespace, runtime=runtime)
    yield Metered(client, port)


def worker_client(metered: Metered, *agents: Agent) -> Client:
    config = metered.client.config()
    config["plugins"] = [TowlinePlugin(list(agents))]
    return Client(**config)


async def test_runs_models_tokens_and_tools_are_counted_once(metered: Metered) -> None:
    agent = traced_agent(f"met-{uuid.uuid4().hex[:6]}")
    client = worker_client(metered, agent)
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    # no workflow cache: every activation replays the run, and nothing is counted twice
    async with Worker(client, task_queue=queue, max_cached_workflows=0):
        await run(client, agent.name, "What are 2+3 and 6*7?", task_queue=queue)
        with pytest.raises(RunError) as failed:
            await run(client, agent.name, "again", task_queue=queue, limits=Limits(max_steps=1))
    assert failed.value.reason == "MaxStepsExceeded"
    text = scrape(metered.port)
    name = agent.name
    assert metric_value(text, "towline_runs_started", agent=name) == 2
    assert metric_value(text, "towline_runs_succeeded", agent=name) == 1
    assert metric_value(text, "towline_runs_failed", agent=name, reason="MaxStepsExceeded") == 1
    model = f"{name}-model"
    # 2 requests in the first run, 1 in the second (then max_steps stops it)
    assert metric_value(text, "towline_model_requests", agent=name, model=model, status="ok") == 3
    assert metric_value(text, "towline_model_tokens", agent=name, model=model, type="input") == 100
    assert metric_value(text, "towline_model_tokens", agent=name, model=model, type="output") == 33
    for tool in ("add", "multiply"):
        assert metric_value(text, "towline_tool_calls", agent=name, tool=tool,
                            status="succeeded") == 2
    # Temporal's own runtime metrics, on the same endpoint
    assert (metric_value(text, "temporal_workflow_completed", task_queue=queue) or 0) >= 1
    assert metric_value(text, "temporal_activity_execution_latency_count",
                        activity_type="towline.tool.add", task_queue=queue) == 2


async def test_approval_wait_and_denied_calls(metered: Metered) -> None:
    base = traced_agent(f"appr-{uuid.uuid4().hex[:6]}")
    agent = Agent(name=base.name, model=base.model, tools=[*base.tools],
                  capabilities=[ToolApproval(tools=["multiply"])])
    client = worker_client(metered, agent)
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue):
        for decision in ("approve", "reject"):
            handle = await start_run(client, agent.name, "What are 2+3 and 6*7?", task_queue=queue)
            for _ in range(400):
                state = await handle.query("state")
                if "c-mul" in (state.get("pending_approvals") or {}):
                    break
                await asyncio.sleep(0.05)
            await handle.execute_update(decision, ApprovalDecision(call_id="c-mul"))
            await handle.result()
    text = scrape(metered.port)
    name = agent.name
    assert metric_value(text, "towline_approval_wait_count", agent=name, tool="multiply",
                        outcome="approved") == 1
    assert metric_value(text, "towline_approval_wait_count", agent=name, tool="multiply",
                        outcome="rejected") == 1
    assert metric_value(text, "towline_tool_calls", agent=name, tool="multiply",
                        status="succeeded") == 1
    assert metric_value(text, "towline_tool_calls", agent=name, tool="multiply",
                        status="denied") == 1
    assert metric_value(text, "towline_runs_succeeded", agent=name) == 2


def test_every_metric_is_documented() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "production.md").read_text()
    for name in METRICS:
        assert f"`{name}`" in page, name
