"""Steering a busy session (engine 4): a `send` while a turn runs waits its turn (`queue`, the
default), interrupts the model request in flight (`interrupt`: Temporal's activity
cancellation, then the run asks again with the message), or is refused (`reject`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError, WorkflowUpdateStage

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, UserPart, tool
from towline.capabilities import ToolApproval
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput, RunResult
from towline.review import approve, pending
from towline.testing import towline_worker
from towline.workflows import SendInput

pytestmark = pytest.mark.asyncio(loop_scope="session")


@tool
def check(item: str) -> str:
    """Check something (asks a person first: the turn is busy meanwhile)."""
    return f"checked {item}"


def _users(messages: list[Message]) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPart)]


def gated_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The first turn checks something (and waits for approval); every answer names the user
    messages it saw."""
    if len(_users(messages)) == 1 and not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="check", args={"item": "a"},
                                                 tool_call_id="c1")])
    return "saw: " + " | ".join(_users(messages))


async def slow_model(messages: list[Message], info: ModelInfo) -> str:
    """Answers the prompt slowly (long enough to be interrupted); later requests at once."""
    if _users(messages) == ["slow"]:
        await asyncio.sleep(30)
    return "saw: " + " | ".join(_users(messages))


gated = Agent(name="steer-gated", model=FunctionModel(gated_model, model_name="steer-gated"),
              tools=[check], capabilities=[ToolApproval(tools=["check"])])
slow = Agent(name="steer-slow", model=FunctionModel(slow_model, model_name="steer-slow"))


async def _start(tc: Client, queue: str, agent: Agent, prompt: str, on_busy: str) -> WorkflowHandle[Any, Any]:
    return await tc.start_workflow("AgentRun", RunInput(agent=agent.name, prompt=prompt, session=True,
                                                        on_busy=on_busy),  # pyright: ignore[reportArgumentType]
                                   id=f"steer-{on_busy}-{queue}", task_queue=queue, result_type=RunResult)


async def _state(handle: WorkflowHandle[Any, Any], key: str, value: Any) -> None:
    for _ in range(400):
        state: dict[str, Any] = await handle.query("state")
        if state.get(key) == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {key}={value!r}")


async def test_queue_a_message_sent_mid_turn_waits_its_turn(client: Client) -> None:
    async with towline_worker(client, [gated]) as (tc, queue):
        handle = await _start(tc, queue, gated, "first", "queue")
        while not await pending(handle):
            await asyncio.sleep(0.05)
        # accepted, while the turn waits
        sent = await handle.start_update("send", SendInput(content="second"),
                                         wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=str)
        await approve(handle)
        assert await sent.result() == "saw: first | second"
        await _state(handle, "waiting_for", "message")
        handle_msgs = await handle.query("messages")
        answers = [m for m in handle_msgs if m.get("kind") == "response" and m["parts"][0]["part_kind"] == "text"]
        # the first turn answered without the queued message; it then got a turn of its own
        assert [a["parts"][0]["content"] for a in answers] == ["saw: first", "saw: first | second"]
        await handle.signal("end")
        await handle.result()


async def test_reject_tells_the_sender_the_run_is_busy(client: Client) -> None:
    async with towline_worker(client, [gated]) as (tc, queue):
        handle = await _start(tc, queue, gated, "first", "reject")
        while not await pending(handle):
            await asyncio.sleep(0.05)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("send", SendInput(content="second"))
        assert "the run is busy" in str(refused.value.cause)
        await approve(handle)
        await _state(handle, "waiting_for", "message")
        assert await handle.execute_update("send", SendInput(content="now")) == "saw: first | now"
        await handle.signal("end")
        await handle.result()


async def test_interrupt_cancels_the_model_request_and_answers_with_the_message(client: Client) -> None:
    async with towline_worker(client, [slow]) as (tc, queue):
        handle = await _start(tc, queue, slow, "slow", "interrupt")
        await _state(handle, "status", "running")
        for _ in range(100):  # the model activity is under way
            desc = await handle.describe()
            if desc.raw_description.pending_activities:
                break
            await asyncio.sleep(0.05)
        answer = await handle.execute_update("send", SendInput(content="faster please"))
        assert answer == "saw: slow | faster please"
        await handle.signal("end")
        result: RunResult = await handle.result()
    assert result.counters.requests == 2 and result.counters.run_step == 2  # the cancelled one counts
    history = await handle.fetch_history()
    names = [e.event_type for e in history.events]
    from temporalio.api.enums.v1 import EventType
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in names
