"""`anthropic:<model>` end to end: the real `anthropic` SDK against a local server speaking the
Messages API, through real runs on the dev server."""

from __future__ import annotations

from typing import Any

import pytest
from fake_server import FakeProvider, Reply, check_exchange
from provider_helpers import KEY, QUICK, add
from pydantic import BaseModel
from temporalio.client import Client

from scripts import returns
from towline import Agent, ModelResponse, ModelSettings
from towline.client import run
from towline.testing import towline_worker


@pytest.fixture
def anthropic_env(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return provider


def message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    """A Messages API `message` object."""
    return {"id": "msg_t", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


async def test_tool_loop(client: Client, anthropic_env: FakeProvider) -> None:
    anthropic_env.play("anthropic_tool_loop")
    agent = Agent(name="prov-anthropic-loop", model="anthropic:claude-sonnet-4-6", tools=[add],
                  instructions="You add numbers with the add tool.", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is 20 + 22?", task_queue=queue)

    check_exchange(anthropic_env, "anthropic_tool_loop")
    # this SDK version (2.14) sends the key as a bearer token, with its API version header
    assert all(r.path == "/v1/messages" and r.headers["authorization"] == f"Bearer {KEY}"
               and r.headers["anthropic-version"] for r in anthropic_env.requests)
    assert result.output == "20 + 22 = 42."
    assert [(r.tool_call_id, r.status, r.content) for r in returns(result.messages)] == [
        ("toolu_01", "succeeded", 42)]
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [(r.model_name, r.finish_reason) for r in responses] == [
        ("claude-sonnet-4-6", "tool_calls"), ("claude-sonnet-4-6", "stop")]
    assert responses[0].text == "I'll add them."
    # cache reads are input tokens too (the API reports them apart)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cache_read_tokens) == (
        870, 72, 440)


class Sum(BaseModel):
    """The answer."""

    total: int


async def test_structured_output_and_settings(client: Client, anthropic_env: FakeProvider) -> None:
    anthropic_env.script(Reply(message(
        [{"type": "tool_use", "id": "toolu_o", "name": "final_result", "input": {"total": 42}}],
        stop="tool_use")))
    agent = Agent(name="prov-anthropic-structured", model="anthropic:claude-sonnet-4-6",
                  output_type=Sum, settings=ModelSettings(temperature=0.5, extra={"top_k": 5}),
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "20 + 22?", task_queue=queue)

    assert result.output == Sum(total=42)
    [body] = anthropic_env.bodies()
    assert body["max_tokens"] == 4096  # the API requires it: a default fills it
    assert (body["temperature"], body["top_k"]) == (0.5, 5)
    assert [t["name"] for t in body["tools"]] == ["final_result"]
    assert body["tools"][0]["input_schema"]["required"] == ["total"]


async def test_a_failed_return_is_an_error_tool_result(client: Client, anthropic_env: FakeProvider) -> None:
    from towline import ToolError, tool

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        raise ToolError(f"no such key: {key}")

    anthropic_env.script(
        Reply(message([{"type": "tool_use", "id": "toolu_l", "name": "lookup", "input": {"key": "k"}}],
                      stop="tool_use")),
        Reply(message([{"type": "text", "text": "It does not exist."}])),
    )
    agent = Agent(name="prov-anthropic-error-result", model="anthropic:claude-sonnet-4-6",
                  tools=[lookup], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "look up k", task_queue=queue)
    assert result.output == "It does not exist."
    last = anthropic_env.bodies()[1]["messages"][-1]
    assert last == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_l", "content": "[failed] no such key: k",
         "is_error": True, "cache_control": {"type": "ephemeral"}}]}  # the newest block: a breakpoint
