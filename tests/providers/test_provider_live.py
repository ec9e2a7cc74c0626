"""Opt-in smoke test against the real services; it runs only where the keys are set:

    OPENAI_API_KEY=sk-... ANTHROPIC_API_KEY=sk-ant-... python -m pytest tests/providers/test_provider_live.py

Each provider runs one tool loop for real (a few hundred tokens, a fraction of a cent).
Everything it checks is also checked offline against recorded exchanges; this test only
confirms that the services still speak the format those recordings hold.
"""

from __future__ import annotations

import os

import pytest
from provider_helpers import add
from temporalio.client import Client

from scripts import returns
from towline import Agent
from towline.client import run
from towline.testing import towline_worker

LIVE = [
    pytest.param("openai:gpt-4.1-mini", "OPENAI_API_KEY", id="openai"),
    pytest.param("openai-responses:gpt-4.1-mini", "OPENAI_API_KEY", id="openai-responses"),
    pytest.param("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY", id="anthropic"),
]


@pytest.mark.parametrize(("model", "key"), LIVE)
async def test_live_tool_loop(client: Client, model: str, key: str) -> None:
    if not os.environ.get(key):
        pytest.skip(f"live test: set {key} to run it")
    agent = Agent(name=f"live-{model.split(':')[0]}", model=model, tools=[add],
                  instructions="Use the add tool for arithmetic, then answer with just the number.")
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is 2 + 3?", task_queue=queue)
    assert "5" in str(result.output)
    assert [r.status for r in returns(result.messages)] == ["succeeded"]
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.usage.known_cost is not None and result.usage.known_cost > 0
