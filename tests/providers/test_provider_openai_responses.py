"""`openai-responses:<model>` end to end: the real `openai` SDK against a local server speaking
the Responses API, through real runs on the dev server."""

from __future__ import annotations

from typing import Any

import pytest
from fake_server import FakeProvider, Reply, check_exchange
from provider_helpers import KEY, QUICK, add
from pydantic import BaseModel
from temporalio.client import Client

from scripts import returns
from towline import Agent, ModelResponse
from towline.client import run
from towline.testing import towline_worker


@pytest.fixture
def openai_env(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return provider


def response(output: list[dict[str, Any]], *, status: str = "completed",
             incomplete: str | None = None) -> dict[str, Any]:
    """A Responses API `response` object."""
    return {
        "id": "resp_t", "object": "response", "created_at": 1735689600, "status": status,
        "model": "gpt-4.1-mini-2025-04-14", "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "error": None, "output": output,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 14},
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}


async def test_tool_loop(client: Client, openai_env: FakeProvider) -> None:
    openai_env.play("openai_responses_tool_loop")
    agent = Agent(name="prov-responses-loop", model="openai-responses:gpt-4.1-mini", tools=[add],
                  instructions="You add numbers with the add tool.", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is 4 + 5?", task_queue=queue)

    check_exchange(openai_env, "openai_responses_tool_loop")
    assert all(r.path == "/v1/responses" for r in openai_env.requests)
    assert result.output == "4 + 5 = 9."
    assert [(r.tool_call_id, r.status, r.content) for r in returns(result.messages)] == [
        ("call_r1", "succeeded", 9)]
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [r.finish_reason for r in responses] == ["tool_calls", "stop"]
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cache_read_tokens) == (
        170, 29, 40)


class Sum(BaseModel):
    """The answer."""

    total: int


async def test_structured_output(client: Client, openai_env: FakeProvider) -> None:
    openai_env.script(Reply(response([function_call("call_o", "final_result", '{"total": 9}')])))
    agent = Agent(name="prov-responses-structured", model="openai-responses:gpt-4.1-mini",
                  output_type=Sum, model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "4 + 5?", task_queue=queue)
    assert result.output.model_dump() == {"total": 9}
    assert [t["name"] for t in openai_env.bodies()[0]["tools"]] == ["final_result"]


async def test_incomplete_for_max_output_tokens_is_a_length_response(
    client: Client, openai_env: FakeProvider
) -> None:
    openai_env.script(
        Reply(response([function_call("call_x", "add", '{"a": 1, "b": 1}')], status="incomplete",
                       incomplete="max_output_tokens")),
        Reply(response([{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": "2", "annotations": []}]}])),
    )
    agent = Agent(name="prov-responses-length", model="openai-responses:gpt-4.1-mini", tools=[add],
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "1 + 1?", task_queue=queue)
    assert result.output == "2"
    assert [r.status for r in returns(result.messages)] == ["not_executed"]
    follow_up = openai_env.bodies()[1]["input"]
    assert follow_up[-1]["type"] == "function_call_output"
    assert follow_up[-1]["output"].startswith("[not_executed]")
