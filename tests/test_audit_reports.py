"""What a hook, a tool or a model reports that a run cannot keep ends the run typed, or is
reported as what it is: never a workflow task failing forever, never a value changed silently.

Contributed state over the payload limit (`PayloadTooLarge`, naming the hook and the key), a
`ToolResult.state` over it (the same, naming the tool, and the tool runs once), a tool's
`Usage(cost=inf)` and `cost=1e300`, a NaN, bytes, a cycle or an object as a tool's result, a
response asking for more tool calls than Temporal keeps pending (2,001) or than one workflow
task can handle before the deadlock detector (10,000), and a `send` too large for the session
(refused by its validator, the session goes on). Real runs on the dev server, one worker.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import RetryPolicy

from scripts import returns, statuses
from towline import Agent, Middleware, ToolContext, tool
from towline.client import run, start_run
from towline.errors import RunError
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, Usage, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult
from towline.testing import towline_worker
from towline.tools import ToolResult

TIMEOUT = 120.0
"""A bound on a run the tests wait for (the 10,000-call one took 17 s on a busy machine and
over 45 s on a loaded one): a wait for the run's end, not a limit on its time."""
BIG = 2 * 1024 * 1024 + 1000
"""Characters of a value over Temporal's 2 MiB payload limit."""
RAN: list[str] = []
"""`state_blob`'s executions (run ids)."""


def _prompt(messages: list[Message]) -> str:
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, UserPart) and isinstance(p.content, str):
                    return p.content
    return ""


def _cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


RESULTS: dict[str, Any] = {
    "nan": lambda: float("nan"), "bytes": lambda: b"\xff\xfe\x00", "cyclic": _cyclic,
    "object": object, "inf_cost": lambda: ToolResult(content="ok", usage=Usage(cost=math.inf)),
    "huge_cost": lambda: ToolResult(content="ok", usage=Usage(cost=1e300)),
}


# a tool that fails every time is retried 5 times: quickly here, not over 15 s of backoff
@tool(idempotent=True, retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50),
                                                backoff_coefficient=1.0, maximum_attempts=5))
def report(kind: str) -> Any:
    """Returns what `kind` names."""
    return RESULTS[kind]()


@tool(idempotent=True)
def state_blob(ctx: ToolContext) -> ToolResult:
    """Returns a state update over the payload limit."""
    RAN.append(ctx.run_id)
    return ToolResult(content="stored", state={"blob": "x" * BIG})


@tool(idempotent=True)
def noop(i: int) -> int:
    """Does nothing."""
    return i


def _answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if sum(isinstance(m, ModelResponse) for m in messages) > 0:
        return "done"
    prompt = _prompt(messages)
    kind, _, arg = prompt.partition(" ")
    if kind == "report":
        return ModelResponse(parts=[ToolCallPart(tool_name="report", args={"kind": arg},
                                                 tool_call_id="r1")])
    if kind == "state_blob":
        return ModelResponse(parts=[ToolCallPart(tool_name="state_blob", tool_call_id="s1")])
    if kind == "calls":
        return ModelResponse(parts=[ToolCallPart(tool_name="noop", args={"i": i},
                                                 tool_call_id=f"n{i}") for i in range(int(arg))])
    return "done"


def _big_state(state: dict[str, Any]) -> dict[str, Any] | None:
    if _prompt(state["messages"]) == "big_state":
        return {"blob": "y" * BIG}
    return None


agent = Agent(name="audit-reports", model=FunctionModel(_answer, model_name="audit-reports"),
              tools=[report, state_blob, noop],
              capabilities=[Middleware("bigstate", after_model=_big_state,
                                       state_schema={"blob": None})])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, [agent]) as pair:
        yield pair


async def _run(worker: tuple[Client, str], prompt: str, **options: Any) -> RunResult:
    tclient, queue = worker
    try:
        return await asyncio.wait_for(run(tclient, agent, prompt, task_queue=queue, **options),
                                      TIMEOUT)
    except TimeoutError:
        raise AssertionError(f"{prompt!r}: the run did not end within {TIMEOUT}s") from None


async def test_contributed_state_over_the_limit_fails_payload_too_large(
    worker: tuple[Client, str],
) -> None:
    with pytest.raises(RunError) as info:
        await _run(worker, "big_state")
    assert info.value.reason == "PayloadTooLarge", info.value
    assert "bigstate.after_model" in info.value.message and "'blob'" in info.value.message


async def test_a_tool_state_over_the_limit_fails_payload_too_large_after_one_run(
    worker: tuple[Client, str],
) -> None:
    with pytest.raises(RunError) as info:
        await _run(worker, "state_blob")
    err = info.value
    assert err.reason == "PayloadTooLarge", err
    assert "state_blob" in err.message and "'blob'" in err.message, err.message
    assert err.partial is not None
    assert RAN.count(err.partial.run_id) == 1, RAN


@pytest.mark.parametrize(("kind", "said"), [
    ("nan", "NaN"), ("bytes", "bytes"), ("cyclic", "Circular reference"), ("object", "object"),
])
async def test_a_tool_result_json_cannot_carry_is_reported_as_what_it_is(
    worker: tuple[Client, str], kind: str, said: str,
) -> None:
    result = await _run(worker, f"report {kind}")
    assert result.output == "done"
    assert statuses(result.messages) == {"r1": "succeeded"}
    [record] = returns(result.messages)
    assert isinstance(record.content, str) and "JSON cannot carry" in record.content, record
    assert said in record.content, record.content


@pytest.mark.parametrize("kind", ["inf_cost", "huge_cost"])
async def test_a_tool_cost_the_ledger_cannot_record_is_refused(
    worker: tuple[Client, str], kind: str,
) -> None:
    try:
        result = await _run(worker, f"report {kind}")
    except RunError as e:
        assert e.reason == "UsageLimitExceeded", e
        assert "usage.cost" in e.message and "report" in e.message, e.message
        return
    # Usage(cost=inf) is refused where it is made (the tool's own call fails, typed)
    assert kind == "inf_cost", result
    [record] = returns(result.messages)
    assert record.status == "failed" and "finite" in str(record.content), record
    assert result.usage.cost == 0


@pytest.mark.parametrize("count", [2001, 10_000])
async def test_a_response_with_more_calls_than_temporal_holds_fails_typed(
    worker: tuple[Client, str], count: int,
) -> None:
    with pytest.raises(RunError) as info:
        await _run(worker, f"calls {count}")
    err = info.value
    assert err.reason == "UsageLimitExceeded", err
    assert str(count) in err.message and "tool calls" in err.message, err.message
    assert err.partial is not None and err.partial.counters.tool_calls == 0


async def test_an_oversized_send_is_refused_and_the_session_goes_on(
    worker: tuple[Client, str],
) -> None:
    tclient, queue = worker
    handle = await start_run(tclient, agent, "hello", task_queue=queue, session=True)
    try:
        first = await asyncio.wait_for(handle.execute_update("send", {"content": "hi"}), TIMEOUT)
        assert first == "done"
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(
                handle.execute_update("send", {"content": "z" * (1950 * 1024)}), TIMEOUT)
        assert "payload limit" in str(refused.value.cause), refused.value.cause
        again = await asyncio.wait_for(handle.execute_update("send", {"content": "more"}),
                                       TIMEOUT)
        assert again == "done"
    finally:
        await handle.signal("end")
    result = await asyncio.wait_for(handle.result(), TIMEOUT)
    assert result.output == "done"
