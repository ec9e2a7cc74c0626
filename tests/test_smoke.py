"""End-to-end: an agent with a tool runs on the real dev server."""

from __future__ import annotations

from temporalio.client import Client

from towline import Agent, tool
from towline.client import run
from towline.testing import towline_worker


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


agent = Agent(name="smoke-calc", model="test", tools=[add], instructions="Be brief.")


async def test_test_model_runs_tool_and_answers(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "add things", task_queue=queue)
    assert result.output == '{"add": 2}'
    assert result.counters.run_step == 2
    assert result.counters.tool_calls == 1
    statuses = [p.status for m in result.messages if m.kind == "request"
                for p in m.parts if p.part_kind == "tool_return"]
    assert statuses == ["succeeded"]


async def test_worker_given_the_plugin_over_a_plain_client(client: Client, task_queue: str) -> None:
    """`Worker(plain_client, plugins=[TowlinePlugin(...)])` works as the README promises.

    (`towline.runtime.worker.create_worker` builds exactly that worker.)
    """
    from towline.client import connect
    from towline.runtime.worker import create_worker

    target = client.service_client.config.target_host
    async with create_worker(client, [agent], task_queue=task_queue):
        tclient = await connect(target, client.namespace)
        result = await run(tclient, agent, "add", task_queue=task_queue)
    assert result.output == '{"add": 2}'
