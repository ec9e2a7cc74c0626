"""Values from outside never reach a 32- or 64-bit ledger field unchecked (issue: runs left
stuck by an out-of-range limit): each is refused on input with a typed, named error."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy

from towline import (
    Agent,
    Limits,
    Middleware,
    ModelRequest,
    ModelResponse,
    RunError,
    TextPart,
    Usage,
)
from towline.cli import run_cli
from towline.client import run, run_error, start_run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.options import INT32_MAX, INT64_MAX
from towline.testing import towline_worker

agent = Agent(name="input-bounds", model="test")


async def _failed(client: Client, raw: Any) -> tuple[str, str, list[Any]]:
    """Start a run with raw JSON input; its failure reason, message and event types."""
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await tclient.start_workflow(
            "AgentRun", raw, id=f"bounds-{uuid.uuid4().hex[:8]}", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        events = [e.event_type async for e in handle.fetch_history_events()]
    error = run_error(failure.value)
    return error.reason, error.message, events


@pytest.mark.parametrize(("field", "value", "bound"), [
    ("output_retries", 1099511627776, INT32_MAX),
    ("max_steps", 2147483648, INT32_MAX),
    ("tool_calls_limit", 2**40, INT32_MAX),
    ("total_tokens_limit", 2**64, INT64_MAX),
])
async def test_a_limit_past_its_ledger_field_ends_the_run_invalid_input(
    client: Client, field: str, value: int, bound: int
) -> None:
    reason, message, events = await _failed(
        client, {"agent": agent.name, "prompt": "hi", "limits": {field: value}})
    assert reason == "InvalidRunInput"
    assert f"limits.{field}" in message and str(bound) in message
    # ended, never a workflow task failing over and over
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    assert events[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED


def test_limits_are_bounded_in_python_too() -> None:
    with pytest.raises(ValueError, match="less than or equal to 2147483647"):
        Limits(max_steps=INT32_MAX + 1)
    with pytest.raises(ValueError, match="finite"):
        Limits(cost_limit=float("inf"))
    assert Limits(max_steps=INT32_MAX).max_steps == INT32_MAX


def test_cli_max_steps_past_the_ledger_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "examples.calculator:agent", "What is 6 times 7?", "--max-steps", "2147483648"]
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "argument --max-steps: 2147483648 is too large (at most 2147483647)" in err


# --- usage a model or a hook reports ------------------------------------------------------


def _huge_usage(messages: list[Message], info: ModelInfo) -> ModelResponse:
    del messages, info
    return ModelResponse(parts=[TextPart(content="done")],
                         usage=Usage(requests=1, input_tokens=2**63 + 5, output_tokens=1))


async def test_a_usage_figure_past_the_ledger_fails_the_model_request(client: Client) -> None:
    broken = Agent(name="huge-usage", model=FunctionModel(_huge_usage),
                   model_retry_policy=RetryPolicy(maximum_attempts=3))
    async with towline_worker(client, [broken]) as (tclient, queue):
        with pytest.raises(RunError) as failure:
            await run(tclient, broken, "hi", task_queue=queue)
    error = failure.value
    assert error.reason == "ModelRequestFailed"
    assert f"usage.input_tokens = {2**63 + 5}" in error.message
    # the partial run is kept: the prompt, and the ledger as last confirmed
    assert error.partial is not None
    assert any(isinstance(m, ModelRequest) for m in error.partial.messages)
    assert error.partial.counters.input_tokens == 0


def _report(state: dict[str, Any]) -> dict[str, Any]:
    del state
    return {"llm_usage": Usage(requests=1, input_tokens=2**62)}


async def test_usage_adding_up_past_the_ledger_ends_the_run_typed(client: Client) -> None:
    """Each hook report is in range; their sum (2 x 2^62) is not."""
    greedy = Agent(name="greedy-hook", model="test",
                   capabilities=[Middleware("greedy", before_model=_report, after_model=_report)])
    async with towline_worker(client, [greedy]) as (tclient, queue):
        handle = await start_run(tclient, greedy, "hi", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        events = [e.event_type async for e in handle.fetch_history_events()]
    error = run_error(failure.value)
    assert error.reason == "UsageLimitExceeded"
    assert "would pass what the ledger records" in error.message
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    assert error.partial is not None and error.partial.counters.input_tokens <= INT64_MAX
