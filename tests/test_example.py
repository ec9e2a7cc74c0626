"""The README's example agent (`examples/calculator.py`) on the session's real dev server."""

from __future__ import annotations

import json

from temporalio.client import Client

from examples.calculator import agent, test_agent
from towline.client import run
from towline.messages import ModelRequest, ModelResponse, ToolReturnPart
from towline.testing import towline_worker


def _returns(messages: list[ModelRequest | ModelResponse]) -> list[tuple[str, object, str]]:
    return [
        (p.tool_name, p.content, p.status)
        for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]


async def test_calculator_answers_with_its_multiply_tool(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "What is 6 times 7?", task_queue=queue)
    assert result.output == "6 times 7 is 42."
    assert _returns(result.messages) == [("multiply", 42, "succeeded")]
    assert result.counters.run_step == 2
    assert result.counters.tool_calls == 1


async def test_calculator_runs_several_tools_in_one_step(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(
            tclient, agent, "What is 2.5 plus 4, and (2 + 3) * 4?", task_queue=queue
        )
    assert result.output == "2.5 plus 4 is 6.5; (2 + 3) * 4 = 20."
    assert sorted(_returns(result.messages)) == [
        ("add", 6.5, "succeeded"), ("evaluate", 20, "succeeded"),
    ]
    assert result.counters.run_step == 2  # both calls came from one response
    assert result.counters.tool_calls == 2


async def test_calculator_reports_an_invalid_expression(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "What is (2 + ) * 4?", task_queue=queue)
    assert _returns(result.messages) == [
        ("evaluate", "'(2 + ) * 4' is not a valid arithmetic expression", "retry"),
    ]
    assert result.output == (
        "I could not compute that: '(2 + ) * 4' is not a valid arithmetic expression."
    )


async def test_the_same_tools_run_offline_on_test_model(client: Client) -> None:
    async with towline_worker(client, [test_agent]) as (tclient, queue):
        result = await run(tclient, test_agent, "anything", task_queue=queue)
    # TestModel calls each tool once with placeholder arguments ("a", 1.0) and summarises:
    # "a" is no arithmetic, so `evaluate` asks for a retry, which the summary reports.
    summary = json.loads(result.output)
    assert summary.pop("evaluate").startswith("cannot evaluate 'a': unsupported element Name")
    assert summary == {"add": 2, "multiply": 1}
    assert [(name, status) for name, _, status in _returns(result.messages)] == [
        ("add", "succeeded"), ("multiply", "succeeded"), ("evaluate", "retry"),
    ]
    assert result.counters.tool_calls == 3
