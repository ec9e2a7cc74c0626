"""Streaming through the real SDKs: each provider's SSE wire format, from a local server.

The recorded tool-loop exchanges, answered as the providers stream them, give
runs whose history is the same as without streaming (same messages, usage,
finish reasons), while the run's live events carry the text in pieces. A
stream that breaks mid-way, and an error event after the 200 status line,
are retried by Temporal like any failed request, the retry's text marked with
its attempt.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic_replies import message
from fake_server import FakeProvider, Reply
from openai_replies import completion
from provider_helpers import KEY, QUICK, add
from sse import Event, chat_chunks
from temporalio.client import Client

from towline import Agent, ModelSettings
from towline.client import events, start_run
from towline.events import RunEvent
from towline.messages import Message
from towline.results import RunResult
from towline.testing import towline_worker

MODELS = {
    "openai": ("openai:gpt-4.1-mini", "openai_chat_tool_loop", "What is 2 + 3?"),
    "openai-responses": ("openai-responses:gpt-4.1-mini", "openai_responses_tool_loop",
                         "What is 4 + 5?"),
    "anthropic": ("anthropic:claude-sonnet-4-6", "anthropic_tool_loop", "What is 20 + 22?"),
}


@pytest.fixture
def endpoints(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return provider


def shape(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation without message ids (they differ between two runs)."""
    return [m.model_dump(mode="json", exclude={"id"}) for m in messages]


async def run_both(client: Client, provider: FakeProvider, name: str) -> tuple[
        RunResult, RunResult, list[RunEvent], list[dict[str, Any]]]:
    """The exchange once without streaming, once streamed; the streamed run's events and
    the request bodies it sent."""
    model, exchange, prompt = MODELS[name]
    agent = Agent(name=f"stream-{name}", model=model, tools=[add], model_retry_policy=QUICK,
                  instructions="You add numbers with the add tool.")
    async with towline_worker(client, [agent]) as (tc, queue):
        provider.play(exchange)
        plain = await (await start_run(tc, agent, prompt, task_queue=queue)).result()
        sent_plain = len(provider.requests)
        provider.play(exchange)
        handle = await start_run(tc, agent, prompt, task_queue=queue, stream=True)
        seen = [e async for e in events(handle)]
        streamed = await handle.result()
    return plain, streamed, seen, [r.body for r in provider.requests[sent_plain:]]


@pytest.mark.parametrize("name", list(MODELS))
async def test_a_streamed_run_records_what_an_unstreamed_one_does(
    client: Client, endpoints: FakeProvider, name: str
) -> None:
    plain, streamed, seen, bodies = await asyncio.wait_for(run_both(client, endpoints, name), 90)

    assert all(body["stream"] is True for body in bodies)
    if name == "openai":
        assert all(body["stream_options"] == {"include_usage": True} for body in bodies)
    assert streamed.output == plain.output
    assert shape(streamed.messages) == shape(plain.messages)
    assert streamed.usage == plain.usage
    assert streamed.counters == plain.counters
    # the text came in pieces, and the pieces make the recorded text of each step
    for response in (e for e in seen if e.type == "response" and e.field("text")):
        texts = [e for e in seen if e.type == "text" and e.step == response.step]
        assert "".join(e.field("delta") for e in texts) == response.field("text")
    assert [e.type for e in seen if e.type in ("tool_start", "tool_end")] == ["tool_start", "tool_end"]


async def test_text_arrives_in_pieces_while_the_model_generates(
    client: Client, endpoints: FakeProvider
) -> None:
    text = "Streaming lets a person read the answer while the model is still writing it."
    endpoints.script(Reply(completion(text), gap=0.1))  # 14 pieces over 1.3 s
    agent = Agent(name="stream-pieces", model="openai:gpt-4.1-mini", model_retry_policy=QUICK,
                  settings=ModelSettings(stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "stream please", task_queue=queue)
        seen = [e async for e in events(handle)]
        result = await handle.result()
    texts = [e for e in seen if e.type == "text"]
    assert len(texts) >= 3, [e.field("delta") for e in texts]
    assert "".join(e.field("delta") for e in texts) == text == result.output


async def test_a_broken_stream_is_retried_and_its_text_starts_over(
    client: Client, endpoints: FakeProvider
) -> None:
    text = "All of this text arrives twice: once cut off, once whole."
    endpoints.script(
        Reply(completion(text), events=chat_chunks(completion(text))[:6], gap=0.1),  # then EOF
        Reply(completion(text), gap=0.02),
    )
    agent = Agent(name="stream-broken", model="openai:gpt-4.1-mini", model_retry_policy=QUICK,
                  settings=ModelSettings(stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        seen = [e async for e in events(handle)]
        result = await handle.result()
    assert result.output == text and result.counters.requests == 1
    attempts = [e.field("attempt") for e in seen if e.type == "text"]
    assert attempts[0] == 1 and attempts[-1] == 2
    second = "".join(e.field("delta") for e in seen if e.type == "text" and e.field("attempt") == 2)
    assert second == text
    assert len(endpoints.requests) == 2


async def test_an_anthropic_error_event_mid_stream_is_retried_like_its_status(
    client: Client, endpoints: FakeProvider
) -> None:
    answer = message([{"type": "text", "text": "Fine now."}])
    overloaded: list[Event] = [
        ("message_start", {"type": "message_start", "message": {**answer, "content": []}}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]
    endpoints.script(Reply(answer, events=overloaded), Reply(answer))
    agent = Agent(name="stream-overloaded", model="anthropic:claude-sonnet-4-6",
                  model_retry_policy=QUICK, settings=ModelSettings(stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await (await start_run(tc, agent, "hi", task_queue=queue)).result()
    assert result.output == "Fine now."
    assert len(endpoints.requests) == 2
