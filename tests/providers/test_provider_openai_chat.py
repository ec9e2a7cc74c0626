"""`openai:<model>` end to end: the real `openai` SDK against a local server speaking Chat
Completions, through real runs on the dev server."""

from __future__ import annotations

from typing import Any

import pytest
from fake_server import FakeProvider, Reply, check_exchange
from openai_replies import completion, tool_call
from provider_helpers import KEY, QUICK, add
from pydantic import BaseModel
from temporalio.client import Client

from scripts import returns
from towline import Agent, ModelResponse, ModelSettings, tool
from towline.client import run, start_run
from towline.runtime.ledger import counters_from_history
from towline.testing import towline_worker


@pytest.fixture
def openai_env(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    """The worker's environment points `openai:` models at the fake server."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return provider


async def test_tool_loop(client: Client, openai_env: FakeProvider) -> None:
    openai_env.play("openai_chat_tool_loop")
    agent = Agent(name="prov-openai-loop", model="openai:gpt-4.1-mini", tools=[add],
                  instructions="You add numbers with the add tool.", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is 2 + 3?", task_queue=queue)

    check_exchange(openai_env, "openai_chat_tool_loop")  # both requests, exactly as recorded
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in openai_env.requests)
    assert result.output == "2 + 3 = 5."
    assert [(r.tool_call_id, r.status, r.content) for r in returns(result.messages)] == [
        ("call_a1", "succeeded", 5)]
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [(r.model_name, r.finish_reason) for r in responses] == [
        ("gpt-4.1-mini-2025-04-14", "tool_calls"), ("gpt-4.1-mini-2025-04-14", "stop")]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (150, 26)
    assert result.usage.cache_read_tokens == 64
    # a custom endpoint has no known price: unknown, not zero
    assert (result.usage.cost, result.usage.unpriced_requests) == (0.0, 2)
    assert (result.counters.cost_micros, result.counters.unpriced_requests) == (0, 2)


class Sum(BaseModel):
    """The answer."""

    total: int


async def test_structured_output_through_the_output_tool(client: Client, openai_env: FakeProvider) -> None:
    openai_env.script(Reply(completion(calls=[tool_call("call_o", "final_result", {"total": 5})])))
    agent = Agent(name="prov-openai-structured", model="openai:gpt-4.1-mini", output_type=Sum,
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "2 + 3?", task_queue=queue)

    assert result.output.model_dump() == {"total": 5}
    [request] = openai_env.bodies()
    [offered] = request["tools"]
    assert offered["function"]["name"] == "final_result"
    assert offered["function"]["parameters"]["properties"] == {"total": {"title": "Total", "type": "integer"}}


async def test_malformed_arguments_become_a_validation_error_the_model_sees(
    client: Client, openai_env: FakeProvider
) -> None:
    broken = '{"a": 2, "b": '  # cut off: not JSON
    openai_env.script(
        Reply(completion(calls=[tool_call("call_bad", "add", broken)])),
        Reply(completion(calls=[tool_call("call_ok", "add", {"a": 2, "b": 3})])),
        Reply(completion("5")),
    )
    agent = Agent(name="prov-openai-malformed", model="openai:gpt-4.1-mini", tools=[add],
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "2 + 3?", task_queue=queue)
        result = await handle.result()

    assert result.output == "5"
    assert [(r.tool_call_id, r.status) for r in returns(result.messages)] == [
        ("call_bad", "validation_error"), ("call_ok", "succeeded")]
    second = openai_env.bodies()[1]["messages"]
    # the model sees its own text back, and the error, as the call's tool message
    assert second[-2]["tool_calls"][0]["function"]["arguments"] == broken
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_bad"
    assert second[-1]["content"].startswith("[validation_error]")
    assert "not a JSON object" in second[-1]["content"]
    # it counted as one of the tool's retries, and the next success reset the count
    snapshots = counters_from_history((await handle.fetch_history()).events)
    assert {"add": 1} in [s.tool_retries for s in snapshots]
    assert result.counters.tool_retries == {}


async def test_a_length_response_executes_none_of_its_calls(client: Client, openai_env: FakeProvider) -> None:
    ran: list[str] = []

    @tool
    def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "noted"

    openai_env.script(
        Reply(completion(calls=[tool_call("call_n", "note", {"text": "half"})], finish="length")),
        Reply(completion("done")),
    )
    agent = Agent(name="prov-openai-length", model="openai:gpt-4.1-mini", tools=[note],
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "note it", task_queue=queue)

    assert ran == []
    assert [(r.tool_call_id, r.status) for r in returns(result.messages)] == [("call_n", "not_executed")]
    first = next(m for m in result.messages if isinstance(m, ModelResponse))
    assert first.finish_reason == "length"
    assert openai_env.bodies()[1]["messages"][-1]["content"].startswith("[not_executed]")


async def test_settings_map_to_the_request(client: Client, openai_env: FakeProvider) -> None:
    openai_env.script(Reply(completion("ok")))
    settings = ModelSettings(temperature=0.2, top_p=0.9, max_tokens=50,
                             extra={"seed": 7, "user": "u-1"})
    agent = Agent(name="prov-openai-settings", model="openai:gpt-4.1-mini", settings=settings,
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        await run(tc, agent, "hi", task_queue=queue)

    [body] = openai_env.bodies()
    picked: dict[str, Any] = {k: body.get(k) for k in
                              ("temperature", "top_p", "max_completion_tokens", "seed", "user")}
    assert picked == {"temperature": 0.2, "top_p": 0.9, "max_completion_tokens": 50, "seed": 7,
                      "user": "u-1"}
    assert "tools" not in body
