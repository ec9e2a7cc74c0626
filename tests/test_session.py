"""Multi-turn sessions (`send`), and cancelling a run (`cancel`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from towline import Agent, ModelResponse, RunError, ToolCallPart, tool
from towline.client import run_error, start_run
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker
from towline.workflows import SendInput

gate = asyncio.Event()


def _prompts(messages: list[Message]) -> list[str]:
    return [p.text for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, UserPart)]


def echo(messages: list[Message], info: ModelInfo) -> str:
    """Answers with every user prompt so far, so a test sees what reached the model."""
    return " | ".join(_prompts(messages))


@tool
async def wait_for_gate() -> str:
    """Blocks until the test opens the gate."""
    await gate.wait()
    return "opened"


def slow_then_echo(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not any(m.kind == "response" for m in messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="wait_for_gate", args={})])
    return echo(messages, info)


session_agent = Agent(name="session-echo", model=FunctionModel(echo, model_name="session-echo"))
busy_agent = Agent(name="session-busy", model=FunctionModel(slow_then_echo, model_name="busy"),
                   tools=[wait_for_gate])


async def _status(handle: WorkflowHandle[Any, Any], want: str) -> None:
    for _ in range(200):
        if (await handle.query("state"))["status"] == want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never reached status {want!r}")


async def test_a_session_answers_each_send_and_keeps_the_conversation(client: Client) -> None:
    async with towline_worker(client, [session_agent]) as (tclient, queue):
        handle = await start_run(tclient, session_agent, "hello", task_queue=queue, session=True)
        await _status(handle, "waiting")
        first = await handle.execute_update("send", SendInput(content="how are you"))
        second = await handle.execute_update("send", SendInput(content="bye"))
        assert first == "hello | how are you"
        assert second == "hello | how are you | bye"
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("send", SendInput(content="   "))
        await handle.signal("end")  # ends a waiting session with its last answer
        result = await handle.result()
    assert result.output == "hello | how are you | bye"
    assert _prompts(result.messages) == ["hello", "how are you", "bye"]
    assert result.counters.run_step == 3


async def test_send_during_a_run_reaches_the_next_request(client: Client) -> None:
    gate.clear()
    async with towline_worker(client, [busy_agent]) as (tclient, queue):
        handle = await start_run(tclient, busy_agent, "first", task_queue=queue)
        await _status(handle, "running")
        update = asyncio.create_task(handle.execute_update("send", SendInput(content="also this")))
        await asyncio.sleep(0.3)
        gate.set()
        answer = await update
        result = await handle.result()
    assert answer == result.output == "first | also this"
    with pytest.raises(RPCError, match="completed"):  # the run has ended: nothing would answer
        await handle.execute_update("send", SendInput(content="too late"))


async def test_cancel_fails_a_running_run_with_its_partial(client: Client) -> None:
    gate.clear()
    async with towline_worker(client, [busy_agent]) as (tclient, queue):
        handle = await start_run(tclient, busy_agent, "go", task_queue=queue)
        await _status(handle, "running")
        await handle.signal("cancel")
        gate.set()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    error = run_error(failure.value)
    assert isinstance(error, RunError)
    assert error.reason == "Cancelled"
    assert error.partial is not None and error.partial.counters.tool_calls == 1
