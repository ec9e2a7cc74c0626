"""Live events of real runs: what a subscriber sees, in order, and what streaming costs history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    SignalWorkflowInput,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from towline import Agent, ModelSettings, ToolCallPart, tool
from towline.activities.streaming import MAX_BATCHES
from towline.client import events, start_run
from towline.events import RunEvent
from towline.messages import Message, ModelResponse
from towline.models import FunctionModel, ModelInfo
from towline.testing import history_events, towline_worker


@tool
def double(n: int) -> int:
    """Twice `n`."""
    return 2 * n


WORDS = ["The ", "double ", "of ", "21 ", "is ", "42."]


async def typing_model(messages: list[Message], info: ModelInfo) -> AsyncIterator[str | ToolCallPart]:
    """Streams a sentence word by word; calls `double` first."""
    if not any(isinstance(m, ModelResponse) for m in messages):
        yield "Let me compute. "
        yield ToolCallPart(tool_name="double", args={"n": 21}, tool_call_id="call_d")
        return
    for word in WORDS:
        await asyncio.sleep(0.15)
        yield word


def streaming_agent(name: str, stream: bool = True) -> Agent:
    return Agent(name=name, model=FunctionModel(typing_model, model_name="typist"),
                 tools=[double], settings=ModelSettings(stream=stream))


async def collect(handle: WorkflowHandle[Any, Any], **options: Any) -> list[RunEvent]:
    return [e async for e in events(handle, **options)]


def signals(history: list[Any]) -> int:
    return sum(1 for e in history if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)


async def test_a_streaming_run_publishes_its_steps_text_and_tools_in_order(client: Client) -> None:
    agent = streaming_agent("stream-order")
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "double 21", task_queue=queue)
        seen = await asyncio.wait_for(collect(handle), 60)
        result = await handle.result()
        # a reader coming later (the run is closed) reads the same events, from any offset
        again = await asyncio.wait_for(collect(handle), 60)
        tail = await asyncio.wait_for(collect(handle, from_offset=5), 60)

    assert [e.offset for e in seen] == list(range(len(seen)))  # no gap, no duplicate
    kinds = [e.type for e in seen]
    assert kinds[0] == "run" and seen[0].field("agent") == "stream-order"
    assert seen[0].field("streaming") is True
    first_text = kinds.index("text")
    # step 1: the text, the response with its call, the tool's start and end; then step 2
    assert kinds[1] == "step" and seen[1].step == 1
    assert kinds[first_text:].index("response") > 0
    one = [e for e in seen if e.step == 1]
    assert [e.type for e in one if e.type != "text"] == ["step", "response", "tool_start", "tool_end"]
    assert "".join(e.field("delta") for e in one if e.type == "text") == "Let me compute. "
    response = next(e for e in one if e.type == "response")
    assert response.field("tool_calls") == [{"call_id": "call_d", "tool": "double", "args": {"n": 21}}]
    end = next(e for e in one if e.type == "tool_end")
    assert (end.field("tool"), end.field("status"), end.field("content")) == ("double", "succeeded", 42)
    two = [e for e in seen if e.step == 2]
    texts = [e for e in two if e.type == "text"]
    assert len(texts) >= 2, "the answer arrived in more than one piece"
    assert "".join(e.field("delta") for e in texts) == "The double of 21 is 42."
    assert all(e.field("attempt") == 1 for e in texts)
    assert next(e for e in two if e.type == "response").field("text") == "The double of 21 is 42."
    assert kinds[-1] == "result" and seen[-1].field("output") == result.output
    assert result.output == "The double of 21 is 42."
    assert [e.to_json() for e in again] == [e.to_json() for e in seen]
    assert [e.to_json() for e in tail] == [e.to_json() for e in seen[5:]]


async def test_text_batches_are_what_history_pays_and_they_are_bounded(client: Client) -> None:
    async def chatty(messages: list[Message], info: ModelInfo) -> AsyncIterator[str]:
        for i in range(400):  # a long answer: many more pieces than batches
            await asyncio.sleep(0.01)
            yield f"w{i} "

    on = Agent(name="stream-bound", model=FunctionModel(chatty, model_name="chatty"),
               settings=ModelSettings(stream=True))
    async with towline_worker(client, [on]) as (tc, queue):
        streamed = await start_run(tc, on, "talk", task_queue=queue)
        quiet = await start_run(tc, on, "talk", task_queue=queue, stream=False)
        seen = await asyncio.wait_for(collect(streamed), 60)
        quiet_seen = await asyncio.wait_for(collect(quiet), 60)
        assert (await streamed.result()).output == (await quiet.result()).output

    texts = [e for e in seen if e.type == "text"]
    assert 2 <= len(texts) <= MAX_BATCHES
    assert "".join(e.field("delta") for e in texts) == "".join(f"w{i} " for i in range(400))
    assert signals(await history_events(streamed)) == len(texts)  # one signal per batch
    # the same run without streaming: the lifecycle events, no text, no signal at all
    assert [e.type for e in quiet_seen] == ["run", "step", "response", "result"]
    assert quiet_seen[0].field("streaming") is False
    assert signals(await history_events(quiet)) == 0


class _SlowAck(Interceptor):
    """The server's answer to each of the stream's signals comes back 0.5 s late."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        class Outbound(OutboundInterceptor):
            async def signal_workflow(self, input: SignalWorkflowInput) -> None:
                await super().signal_workflow(input)  # on the server from here on
                if input.signal.startswith("__temporal_workflow_stream"):
                    await asyncio.sleep(0.5)

        return Outbound(next)


async def test_a_batch_on_its_way_when_the_model_ends_is_signalled_once(client: Client) -> None:
    """The model finishes while a batch's signal waits for its answer: the call waits for it
    rather than cutting it short and sending it again (history would pay for both)."""
    async def brief(messages: list[Message], info: ModelInfo) -> AsyncIterator[str]:
        yield "first "
        await asyncio.sleep(0.5)  # ends while the first batch (sent at 0.3 s) awaits its answer
        yield "last"

    agent = Agent(name="stream-slow-ack", model=FunctionModel(brief, model_name="brief"),
                  settings=ModelSettings(stream=True))
    slow = Client(**{**client.config(), "interceptors": [_SlowAck()]})
    async with towline_worker(slow, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "talk", task_queue=queue)
        seen = await asyncio.wait_for(collect(handle), 60)
        assert (await handle.result()).output == "first last"
    texts = [e.field("delta") for e in seen if e.type == "text"]
    assert texts == ["first ", "last"]
    assert signals(await history_events(handle)) == 2  # one per batch, none sent twice


class _LateQuery(Interceptor):
    """The first query of each run's stream times out, as when its worker is too busy."""

    def __init__(self) -> None:
        self.failed = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        outer = self

        class Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                if input.query.startswith("__temporal_workflow_stream") and not outer.failed:
                    outer.failed += 1
                    raise RPCError("query timed out before a worker could process it",
                                   RPCStatusCode.DEADLINE_EXCEEDED, b"")
                return await super().query_workflow(input)

        return Outbound(next)


async def test_a_closed_runs_events_survive_a_query_no_worker_answered_in_time(
    client: Client,
) -> None:
    agent = streaming_agent("stream-late-query")
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "double 21", task_queue=queue)
        await handle.result()
        seen = await asyncio.wait_for(collect(handle), 60)  # read back by the worker's query
        late = _LateQuery()
        slow = Client(**{**tc.config(), "interceptors": [late]})
        again = await asyncio.wait_for(collect(slow.get_workflow_handle(handle.id)), 60)
    assert late.failed == 1
    assert [e.to_json() for e in again] == [e.to_json() for e in seen]


async def test_a_watched_run_continues_as_new_and_its_offsets_go_on(client: Client) -> None:
    async def ticking(messages: list[Message], info: ModelInfo) -> AsyncIterator[str | ToolCallPart]:
        await asyncio.sleep(0.05)
        yield f"step {info.run_step}"
        if info.run_step < 6:
            yield ToolCallPart(tool_name="double", args={"n": info.run_step})

    agent = Agent(name="stream-can", model=FunctionModel(ticking, model_name="ticking"),
                  tools=[double], settings=ModelSettings(stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await tc.start_workflow(
            "AgentRun", {"agent": agent.name, "prompt": "tick", "continue_as_new_after_events": 40},
            id=f"stream-can-{queue}", task_queue=queue)
        seen = await asyncio.wait_for(collect(handle), 90)  # a subscriber from the start
        result: Any = await tc.get_workflow_handle(handle.id).result()
        first = await history_events(tc.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id))

    assert first[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert result["output"] == "step 6"
    assert [e.offset for e in seen] == list(range(len(seen)))  # across executions: no gap
    assert [e.step for e in seen if e.type == "step"] == [1, 2, 3, 4, 5, 6]
    assert [e.type for e in seen].count("run") == 1  # a continued execution does not restart
    assert seen[-1].type == "result"
