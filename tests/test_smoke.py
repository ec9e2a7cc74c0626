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
