"""A reasoning model's `ThinkingPart`s in the engine: hooks see them, history keeps them as
they came (signature and provider included), the next request sends them back, and a
response that only thinks is no answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from temporalio.client import Client

from scripts import Script, assert_paired, call, returns
from towline import Agent, Middleware, ModelResponse, RetryPart, tool
from towline.client import run
from towline.messages import Message, ModelRequest, ThinkingPart, ToolCallPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

PLAN = ThinkingPart(content="I should look it up.", signature="sig-1", provider="anthropic")
REDACTED = ThinkingPart(signature="opaque-2", redacted=True, provider="anthropic")
SCRIPT = Script([
    ModelResponse(parts=[PLAN, call("lookup", {"city": "Oslo"})], finish_reason="tool_calls"),
    ModelResponse(parts=[REDACTED], finish_reason="stop"),  # thought, but said nothing
    "It is sunny in Oslo.",
])

seen_by_hook: list[list[ThinkingPart]] = []


def _record(state: dict[str, Any]) -> None:
    last = state["messages"][-1]
    assert isinstance(last, ModelResponse)
    seen_by_hook.append(last.thinking)


@tool
def lookup(city: str) -> str:
    """The weather in `city`."""
    return f"sunny in {city}"


AGENT = Agent(name="thinking-engine", model=SCRIPT.model, tools=[lookup],
              capabilities=[Middleware("record", after_model=_record)])


async def test_thinking_flows_through_hooks_history_and_requests(client: Client) -> None:
    async with towline_worker(client, [AGENT]) as (tclient, queue):
        result = await run(tclient, AGENT, "weather in Oslo?", task_queue=queue)
    assert result.output == "It is sunny in Oslo."
    assert seen_by_hook == [[PLAN], [REDACTED], []]
    # the second request carried the first response's thinking exactly as it came
    sent = [m for m in SCRIPT.seen[1].messages if isinstance(m, ModelResponse)]
    assert [m.thinking for m in sent] == [[PLAN]]
    # a thinking-only response is empty for a text agent: retried, counted
    assert result.counters.output_retries_used == 1
    retry = SCRIPT.seen[2].messages[-1]
    assert isinstance(retry, ModelRequest) and isinstance(retry.parts[0], RetryPart)
    assert "empty" in retry.parts[0].content
    kept = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.thinking]
    assert kept == [PLAN, REDACTED]
    assert [r.content for r in returns(result.messages)] == ["sunny in Oslo"]
    assert_paired(result)


async def test_a_streaming_function_model_yields_thinking_first() -> None:
    def pieces(messages: list[Message], info: ModelInfo) -> Iterator[str | ThinkingPart | ToolCallPart]:
        yield "It is "
        yield PLAN  # however late it comes, thinking leads the response, as providers send it
        yield "sunny."
        yield call("lookup", {"city": "Oslo"})

    response = await FunctionModel(pieces).request([], ModelInfo())
    assert [p.part_kind for p in response.parts] == ["thinking", "text", "tool_call"]
    assert response.thinking == [PLAN] and response.text == "It is sunny."
