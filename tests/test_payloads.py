"""Payload-size safety: nothing oversized ever leaves a run stuck.

Temporal refuses payloads over its blob limit (2 MiB by default). Were towline
to schedule such an activity, or complete with such a result, the workflow
*task* would fail and retry forever. Instead: an oversized tool input is not
executed, an oversized tool result is replaced by a note, and an oversized
model response, model request, continue-as-new input or final result fails the
run with `PayloadTooLarge`, carrying a partial run that itself fits.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any
from uuid import uuid4

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter

from towline import Agent, Capability, ModelRequestState, ToolCall, ToolContext, tool
from towline.client import run, run_error
from towline.errors import RunError
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    Usage,
)
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput, RunResult
from towline.testing import towline_worker
from towline.tools import ToolResult
from towline.workflows.run import PAYLOAD_LIMIT

pytestmark = pytest.mark.timeout(60)

MB = 1_000_000
executed: defaultdict[str, int] = defaultdict(int)
"""Tool executions per tool name (tools run in this process)."""
attempts: defaultdict[tuple[str, int], int] = defaultdict(int)
"""Model activity attempts per (workflow id, run step)."""


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def _count(info: ModelInfo) -> None:
    attempts[(activity.info().workflow_id or "", info.run_step)] += 1


def _call(name: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool_name=name, args=args)])


def _size(value: Any) -> int:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0].ByteSize()


@tool
def echo(text: str) -> int:
    """Return the length of `text`."""
    executed["echo"] += 1
    return len(text)


@tool
def blob(n: int) -> str:
    """Return about `n` bytes."""
    executed["blob"] += 1
    return "b" * n


@tool
def blob_with_usage(n: int) -> ToolResult:
    """Return about `n` bytes and report the usage of making them."""
    executed["blob_with_usage"] += 1
    return ToolResult(content="u" * n, usage=Usage(requests=1, input_tokens=7, output_tokens=3))


async def _run(client: Client, agent: Agent, **input_fields: Any) -> RunResult:
    """Run `agent` to its end on a fresh worker; fails the test rather than hang."""
    async with towline_worker(client, [agent]) as (tclient, queue):
        if not input_fields:
            return await asyncio.wait_for(run(tclient, agent, "go", task_queue=queue), 30)
        handle = await tclient.start_workflow(
            "AgentRun", RunInput(agent=agent.name, prompt="go", **input_fields),
            id=f"{agent.name}-{uuid4().hex[:8]}", task_queue=queue, result_type=RunResult,
        )
        return await asyncio.wait_for(handle.result(), 30)


async def _failure(client: Client, agent: Agent, **input_fields: Any) -> RunError:
    try:
        await _run(client, agent, **input_fields)
    except RunError as e:
        return e
    except WorkflowFailureError as e:
        return run_error(e)
    raise AssertionError("the run should have failed")


# --- a model response too large to record ------------------------------------------------


def huge_args_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    _count(info)
    return _call("echo", text="a" * (3 * MB))


huge_args = Agent(
    name="payload-huge-args", model=FunctionModel(huge_args_script, model_name="huge-args"),
    tools=[echo],
)


async def test_model_response_over_the_limit_fails_the_run_at_once(client: Client) -> None:
    executed.clear()
    err = await _failure(client, huge_args)
    assert err.reason == "PayloadTooLarge"
    assert "response" in err.message
    assert executed["echo"] == 0
    # Not retried: another attempt would only cost another oversized answer.
    assert err.partial is not None
    assert [n for (wid, _), n in attempts.items() if wid == err.partial.run_id] == [1]
    assert err.partial.counters.tool_calls == 0


# --- tool arguments that grow past the limit ---------------------------------------------


class Amplify(Capability):
    """A before_tool_execute hook that triples `text` (think: template expansion)."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        return call.model_copy(update={"args": {"text": call.args["text"] * 3}})


def amplified_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    done = _returns(messages)
    if not done:
        return _call("echo", text="a" * MB)
    return f"{done[0].status}: {done[0].content}"


amplified = Agent(
    name="payload-amplified", model=FunctionModel(amplified_script, model_name="amplified"),
    tools=[echo], capabilities=[Amplify()],
)


async def test_tool_arguments_over_the_limit_are_not_executed(client: Client) -> None:
    executed.clear()
    result = await _run(client, amplified)
    assert executed["echo"] == 0
    assert isinstance(result.output, str)
    assert result.output.startswith("not_executed: arguments of ")
    assert "payload limit" in result.output
    assert [r.status for r in _returns(result.messages)] == ["not_executed"]
    # Never started, so not counted as a tool execution.
    assert (result.counters.tool_calls, result.counters.run_step) == (0, 2)


# --- a tool result too large --------------------------------------------------------------


def big_result_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    done = _returns(messages)
    if not done:
        name = info.tools[0].name
        return _call(name, n=3 * MB)
    return f"{done[0].status}: {str(done[0].content)[:120]}"


@pytest.mark.parametrize("tool_", [blob, blob_with_usage], ids=["plain", "ToolResult"])
async def test_tool_result_over_the_limit_is_replaced_by_a_note(client: Client, tool_: Any) -> None:
    executed.clear()
    agent = Agent(
        name=f"payload-big-result-{tool_.name}", tools=[tool_],
        model=FunctionModel(big_result_script, model_name=f"big-result-{tool_.name}"),
    )
    result = await _run(client, agent)
    assert executed[tool_.name] == 1
    assert isinstance(result.output, str)
    assert result.output.startswith("succeeded: [tool result of ")
    assert "payload limit; omitted]" in result.output
    assert result.counters.run_step == 2
    if tool_ is blob_with_usage:  # the note keeps the usage the tool reported
        assert result.usage.input_tokens == 10 + 10 + 7


# --- a canonical history too large to send ------------------------------------------------


def growing_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    return _call("blob", n=MB)


growing = Agent(
    name="payload-growing", model=FunctionModel(growing_script, model_name="growing"),
    tools=[blob],
)


async def test_model_request_over_the_limit_fails_with_a_partial_that_fits(client: Client) -> None:
    executed.clear()
    err = await _failure(client, growing)
    assert err.reason == "PayloadTooLarge"
    assert "model request" in err.message
    # Two requests and two tool results fit; the third request (two 1 MB returns) does not.
    assert executed["blob"] == 2
    partial = err.partial
    assert partial is not None
    assert (partial.request_count, partial.counters.tool_calls) == (2, 2)
    assert _size(partial) <= PAYLOAD_LIMIT
    assert partial.messages, "the partial keeps the newest messages that fit"


# --- a final result too large ------------------------------------------------------------


def big_answer_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not _returns(messages):
        return _call("blob", n=1_200_000)
    return "z" * 700_000


big_answer = Agent(
    name="payload-big-answer", model=FunctionModel(big_answer_script, model_name="big-answer"),
    tools=[blob],
)


async def test_result_over_the_limit_fails_the_run_instead_of_its_workflow_task(
    client: Client,
) -> None:
    err = await _failure(client, big_answer)
    assert err.reason == "PayloadTooLarge"
    assert "result" in err.message
    partial = err.partial
    assert partial is not None
    assert partial.counters.run_step == 2
    assert _size(partial) <= PAYLOAD_LIMIT
    last = partial.messages[-1]
    assert isinstance(last, ModelResponse) and last.text == "z" * 700_000


# --- a continue-as-new input too large -----------------------------------------------------


class LastMessageOnly(Capability):
    """Sends the model only the newest message (the canonical history keeps growing)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return state.model_copy(update={"request_messages": state.messages[-1:]})


def windowed_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step > 3:
        return "done"
    return _call("blob", n=800_000)


windowed = Agent(
    name="payload-windowed", model=FunctionModel(windowed_script, model_name="windowed"),
    tools=[blob], capabilities=[LastMessageOnly()],
)


async def test_continue_as_new_input_over_the_limit_fails_the_run(client: Client) -> None:
    executed.clear()
    # Continue-as-new after every step; the third would carry 2.4 MB of history.
    err = await _failure(client, windowed, continue_as_new_after_events=1)
    assert err.reason == "PayloadTooLarge"
    assert "continue-as-new" in err.message
    assert executed["blob"] == 3
    partial = err.partial
    assert partial is not None
    assert (partial.counters.run_step, partial.counters.tool_calls) == (3, 3)
    assert _size(partial) <= PAYLOAD_LIMIT
