"""A run's history grows linearly with its length: messages travel by reference.

Without references every model activity would carry the whole conversation, so
the history of an n-step run would grow with n². These tests read real
histories back from the server (`tests/test_request_chain.py` has the rest).
"""

from __future__ import annotations

from uuid import uuid4

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from towline import Agent, Limits, ModelResponse, ToolCallPart, tool
from towline.activities import request_cache
from towline.client import run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.runtime.plugin import TowlinePlugin
from towline.testing import towline_worker

RECORD = "r" * 300
seen: list[list[Message]] = []


@tool
def fetch(key: str) -> str:
    """Return a record of constant size."""
    return RECORD + key


def _script(steps: int) -> FunctionModel:
    def respond(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(list(messages))
        done = sum(1 for m in messages if m.kind == "response")
        if done + 1 >= steps:
            return "done"
        return ModelResponse(parts=[ToolCallPart(tool_name="fetch", args={"key": f"k{done}"})])

    return FunctionModel(respond, model_name=f"growth-{steps}")


async def _history_bytes(client: Client, steps: int) -> int:
    agent = Agent(name=f"growth-{steps}", model=_script(steps), tools=[fetch],
                  limits=Limits(max_steps=steps + 1))
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)
        assert result.counters.run_step == steps
        history = await tclient.get_workflow_handle(result.run_id).fetch_history()
    return sum(e.ByteSize() for e in history.events)


async def test_history_bytes_grow_linearly_with_steps(client: Client) -> None:
    small, large = await _history_bytes(client, 12), await _history_bytes(client, 36)
    # Linear growth gives a ratio near 3; carrying the conversation in every model
    # input (quadratic growth) gives well over 5 at these sizes.
    assert large / small < 3.6, (small, large)


async def test_cache_miss_fetches_messages_from_the_workflow(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(request_cache, "NODES", 0)  # the worker keeps nothing: every request
    monkeypatch.setattr(request_cache, "LISTS", 0)  # fetches its messages from the workflow
    seen.clear()
    agent = Agent(name="growth-miss", model=_script(3), tools=[fetch], instructions="Be exact.")
    plugin = TowlinePlugin([agent])
    queue = f"tq-miss-{uuid4().hex[:8]}"
    tclient = Client(**{**client.config(), "plugins": [plugin]})
    async with Worker(tclient, task_queue=queue):
        result = await run(tclient, agent, "go", task_queue=queue)
    assert result.output == "done"
    assert plugin.model_activities.requests.queries == 2  # the first request is all inline
    # The model still received the full conversation at every step.
    assert [len(m) for m in seen] == [2, 4, 6]
    assert seen[-1][1:] == result.messages[:5]
    assert seen[-1][0].parts[0].content == "Be exact."  # type: ignore[union-attr]
