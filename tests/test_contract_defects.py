"""Contract defects found in review, each shown on a real run (issue: wedge, forge or escape).

- a `before_tool_execute` raising a `RunFailure` subclass skips that call only;
- a model hook raising one is a `CapabilityViolation` naming capability and hook
  (`ContentBlocked` is the one deliberate "end the run" signal, and names the hook);
- tokens spent in a turn that fails are counted (hooks' `llm_usage`, a response too
  large to return), and `before_model` edits are in the partial run;
- Temporal's own cancel ends the run as `Cancelled` with its partial run;
- a truncated response's output call is not taken as the final output;
- negative usage from a model is refused; failures carry no worker stack trace;
- the model and tool activities refuse to run outside an `AgentRun`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from scripts import Script, assert_paired, call, calls, returns, text
from towline import (
    Agent,
    Capability,
    ContentBlocked,
    MaxStepsExceeded,
    Middleware,
    ModelRequestState,
    ModelResponse,
    RunError,
    ToolCall,
    ToolContext,
    Usage,
    tool,
)
from towline.client import run, run_error, start_run
from towline.devserver import temporal_binary
from towline.messages import ModelRequest, TextPart, UserPart
from towline.models import ModelInfo
from towline.runtime.ledger import counters_from_history
from towline.testing import towline_worker

pytestmark = pytest.mark.timeout(90)

RAN: list[str] = []


@tool
def note(ctx: ToolContext, text: str) -> str:
    """Write a note."""
    RAN.append(text)
    return f"noted {text}"


class BlocksSecrets(Capability):
    """Refuses (by raising a RunFailure subclass) to let a 'secret' note run."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        if call.args.get("text") == "secret":
            raise ContentBlocked("no secrets in notes")
        return call


async def test_before_tool_run_failure_skips_that_call_and_the_run_goes_on(client: Client) -> None:
    script = Script([calls(call("note", {"text": "secret"}, "a"), call("note", {"text": "ok"}, "b")),
                     text("done")])
    agent = Agent(name="defect-before-tool", model=script.model, tools=[note],
                  capabilities=[BlocksSecrets()])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "go", task_queue=queue)
    first, second = returns(result.messages)
    assert (first.status, second.status) == ("not_executed", "succeeded")
    assert "BlocksSecrets.before_tool_execute raised ContentBlocked" in str(first.content)
    assert result.output == "done" and "ok" in RAN and "secret" not in RAN


class EndsTheRunBadly(Capability):
    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        raise MaxStepsExceeded("I decide the budget")


class BlocksTheRun(Capability):
    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        raise ContentBlocked("the answer mentions a secret")


@pytest.mark.parametrize(
    ("cap", "reason", "says"),
    [
        (EndsTheRunBadly(), "CapabilityViolation",
         "EndsTheRunBadly.before_model_request raised MaxStepsExceeded: I decide the budget"),
        (BlocksTheRun(), "ContentBlocked",
         "BlocksTheRun.after_model_request: the answer mentions a secret"),
    ],
    ids=["run-failure-subclass", "content-blocked"],
)
async def test_model_hook_failures_name_the_hook(
    client: Client, cap: Capability, reason: str, says: str
) -> None:
    agent = Agent(name=f"defect-hook-{uuid.uuid4().hex[:6]}", model=Script([text("hi")]).model,
                  capabilities=[cap])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as failure:
            await run(tc, agent, "go", task_queue=queue)
    assert failure.value.reason == reason
    assert failure.value.message == says


def _summarise(state: dict[str, Any]) -> dict[str, Any]:
    summary = ModelRequest(parts=[UserPart(content="Summary: the user said go.")])
    return {"messages": [summary], "llm_usage": Usage(requests=1, input_tokens=1000,
                                                      output_tokens=200)}


async def test_a_failed_turn_keeps_its_hook_spend_and_edits(client: Client) -> None:
    def fails(messages: Any, info: ModelInfo) -> ModelResponse:
        from temporalio.exceptions import ApplicationError
        raise ApplicationError("bad request", type="HTTP400", non_retryable=True)

    agent = Agent(name="defect-spend", model=Script([fails]).model,
                  capabilities=[Middleware("summariser", before_model=_summarise)])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        history = await handle.fetch_history()
    error = run_error(failure.value)
    assert error.reason == "ModelRequestFailed"
    assert error.partial is not None
    assert (error.partial.usage.input_tokens, error.partial.usage.output_tokens) == (1000, 200)
    assert error.partial.counters.total_tokens == 1200
    assert counters_from_history(history.events)[-1].total_tokens == 1200
    said = [p.content for m in error.partial.messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, UserPart)]
    assert "Summary: the user said go." in said


async def test_a_response_too_large_still_counts_its_request_and_tokens(client: Client) -> None:
    huge = ModelResponse(parts=[TextPart(content="x" * 2_500_000)],
                         usage=Usage(requests=1, input_tokens=7, output_tokens=600_000))
    agent = Agent(name="defect-large", model=Script([huge]).model)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as failure:
            await run(tc, agent, "go", task_queue=queue)
    assert failure.value.reason == "PayloadTooLarge"
    partial = failure.value.partial
    assert partial is not None
    assert partial.counters.requests == 1 and partial.request_count == 1
    assert (partial.counters.input_tokens, partial.counters.output_tokens) == (7, 600_000)


async def _status(handle: WorkflowHandle[Any, Any], want: str) -> None:
    for _ in range(400):
        if (await handle.query("state"))["status"] == want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never reached {want!r}")


async def test_temporal_cancel_during_a_model_call_is_cancelled_with_the_partial(
    client: Client,
) -> None:
    started = asyncio.Event()

    async def slow(messages: Any, info: ModelInfo) -> ModelResponse:
        if info.run_step == 1:
            return calls(call("note", {"text": "before cancel"}, "n1"))
        started.set()
        await asyncio.sleep(60)
        return text("never")

    agent = Agent(name="defect-cancel", model=Script([slow, slow]).model, tools=[note])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        await asyncio.wait_for(started.wait(), 30)
        await handle.cancel()  # what the UI's Cancel button does
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
    error = run_error(failure.value)
    assert error.reason == "Cancelled"
    assert error.partial is not None
    assert error.partial.counters.tool_calls == 1 and error.partial.counters.run_step == 2
    assert [r.status for r in returns(error.partial.messages)] == ["succeeded"]


async def test_cancel_of_a_waiting_session_is_cancelled_not_completed(client: Client) -> None:
    agent = Agent(name="defect-session", model=Script([text("hello")]).model)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue, session=True)
        await _status(handle, "waiting")
        await handle.signal("cancel")
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
    error = run_error(failure.value)
    assert error.reason == "Cancelled"
    assert error.partial is not None and error.partial.counters.run_step == 1


class Answer(BaseModel):
    value: int


async def test_a_truncated_output_call_is_not_the_output(client: Client) -> None:
    cut = calls(call("final_result", {"value": 1}, "o1", kind="output"), finish_reason="length")
    whole = calls(call("final_result", {"value": 2}, "o2", kind="output"), finish_reason="stop")
    agent = Agent(name="defect-length", model=Script([cut, whole]).model, output_type=Answer)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "go", task_queue=queue)
    assert result.output == Answer(value=2)  # the Agent given: an instance, validated
    assert [r.status for r in returns(result.messages)] == ["not_executed", "succeeded"]
    assert_paired(result)


async def test_a_run_started_by_name_returns_the_json_output(client: Client) -> None:
    whole = calls(call("final_result", {"value": 3}, "o1", kind="output"))
    agent = Agent(name="defect-by-name", model=Script([whole]).model, output_type=Answer)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, "defect-by-name", "go", task_queue=queue)
    assert result.output == {"value": 3}


async def test_negative_usage_from_a_model_is_refused(client: Client) -> None:
    liar = ModelResponse.model_construct(
        parts=[TextPart(content="free")], kind="response", id="", model_name=None,
        finish_reason="stop",
        usage=Usage.model_construct(requests=1, input_tokens=-5000, output_tokens=0),
    )
    agent = Agent(name="defect-negative", model=Script([liar]).model)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        history = await handle.fetch_history()
    error = run_error(failure.value)
    assert error.reason == "ModelRequestFailed"
    assert "input_tokens" in error.message
    assert all(c.input_tokens >= 0 for c in counters_from_history(history.events))


async def test_a_run_failure_carries_no_worker_stack_trace(client: Client) -> None:
    agent = Agent(name="defect-trace", model=Script([text("hi")]).model,
                  capabilities=[EndsTheRunBadly()])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        history = await handle.fetch_history()
    failed = history.events[-1].workflow_execution_failed_event_attributes.failure
    assert failed.application_failure_info.type == "CapabilityViolation"
    assert failed.stack_trace == ""
    assert failed.application_failure_info.details.payloads  # the partial run is there


@pytest_asyncio.fixture
async def calculator_worker(client: Client) -> AsyncIterator[str]:
    from examples.calculator import agent

    async with towline_worker(client, [agent]) as (_, queue):
        yield queue


@pytest.mark.parametrize(
    ("activity", "payload"),
    [
        ("towline.tool.multiply",
         ('{"args": {"a": 6, "b": 7}, "ctx": {"run_id": "forged", "agent": "calculator", '
          '"run_step": 1, "tool_name": "multiply", "tool_call_id": "c1"}}')),
        ("towline.model_request", '{"model": "calculator-offline", "messages": []}'),
    ],
    ids=["tool", "model"],
)
async def test_activities_refuse_to_run_outside_a_run(
    calculator_worker: str, target: str, namespace: str, activity: str, payload: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()), "activity", "execute", "--type", activity,
        "--task-queue", calculator_worker, "--activity-id", f"forged-{uuid.uuid4().hex[:6]}",
        "--start-to-close-timeout", "30s", "--input", payload,
        "--address", target, "--namespace", namespace,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    said = (out + err).decode()
    assert proc.returncode != 0, said
    assert "Status   FAILED" in said
    assert f"{activity} runs only as part of an AgentRun workflow" in said
