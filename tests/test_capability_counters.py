"""The six runtime-owned counters: hooks observe them, never change them (real runs).

A capability that overwrites a counter in every call (by returning a changed
state, and by mutating the state it was given in place) cannot change what the
next capability observes nor what the run does; and no hook can replenish a
budget (tool retries, steps, tool calls, output retries).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import Agent, Capability, Limits, ModelRequestState, ModelRetry, ToolContext, tool
from towline.client import run
from towline.errors import RunError
from towline.testing import towline_worker

COUNTERS = (
    "tool_retries", "output_retries_used", "run_step", "tool_calls", "max_steps", "output_retries",
)
HOOKS = ("before_model_request", "after_model_request")
FORMS = ("class", "instance")
LIMITS = Limits(max_steps=6, output_retries=2)

TAMPERED: dict[str, Any] = {
    "tool_retries": {"echo": 9, "other": 3},
    "output_retries_used": 7,
    "run_step": 99,
    "tool_calls": 99,
    "max_steps": 1000,
    "output_retries": 1000,
}
"""What the tampering capability writes: no value a real run would have."""

REPLENISHED: dict[str, Any] = {
    "tool_retries": {}, "output_retries_used": 0, "run_step": 0, "tool_calls": 0,
    "max_steps": 100, "output_retries": 100,
}
"""Fresh budgets a replenishing capability tries to hand the run."""

EXECUTIONS: list[tuple[str, str, str]] = []
"""(agent, run id, tool call id) of every tool execution (tools run in this process)."""
OBSERVED: dict[tuple[str, str], list[dict[str, Any]]] = {}
"""(run id, hook) -> the counters the observing capability saw, request by request."""


@tool
def echo(ctx: ToolContext, word: str, retry: bool = False) -> str:
    """Echo a word; asks the model to retry when told to."""
    EXECUTIONS.append((ctx.agent, ctx.run_id, ctx.tool_call_id))
    if retry:
        raise ModelRetry("try again")
    return word


@tool(max_retries=1)
def always_retry(ctx: ToolContext) -> str:
    """Always asks for a retry."""
    EXECUTIONS.append((ctx.agent, ctx.run_id, ctx.tool_call_id))
    raise ModelRetry("not yet")


def overwrite(state: ModelRequestState, values: dict[str, Any], counter: str) -> ModelRequestState:
    """Overwrite one counter: in place on the given state, and in the returned copy."""
    value = values[counter]
    if counter == "output_retries":
        object.__setattr__(state.agent, "output_retries", value)
        agent = state.agent.model_copy(update={"output_retries": value})
        return state.model_copy(update={"agent": agent})
    if counter == "tool_retries":
        state.tool_retries.clear()
        state.tool_retries.update(value)
        value = dict(value)
    else:
        object.__setattr__(state, counter, value)
    return state.model_copy(update={counter: value})


@dataclass(frozen=True)
class Tamper(Capability):
    """Overwrites `counter` in every call of `hook`."""

    counter: str = "run_step"
    hook: str = "before_model_request"

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        if self.hook != "before_model_request":
            return state
        return overwrite(state, TAMPERED, self.counter)

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        if self.hook != "after_model_request":
            return state
        return overwrite(state, TAMPERED, self.counter)


class Replenish(Capability):
    """Tries to hand every budget back, in both model hooks."""

    @staticmethod
    def _all(state: ModelRequestState) -> ModelRequestState:
        for counter in COUNTERS:
            state = overwrite(state, REPLENISHED, counter)
        return state

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return self._all(state)

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return self._all(state)


def _observe(hook: str, state: ModelRequestState) -> None:
    OBSERVED.setdefault((state.run_id, hook), []).append({
        "tool_retries": dict(state.tool_retries),
        "output_retries_used": state.output_retries_used,
        "run_step": state.run_step,
        "tool_calls": state.tool_calls,
        "max_steps": state.max_steps,
        "output_retries": state.agent.output_retries,
    })


class Observe(Capability):
    """Records the counters it sees (runs after the tampering capability)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        _observe("before_model_request", state)
        return state

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        _observe("after_model_request", state)
        return state


SCRIPT = Script([
    calls(call("echo", {"word": "a", "retry": True}, "c1")),
    calls(call("echo", {"word": "b"}, "c2")),
    text("done"),
])


def _tamper(counter: str, hook: str, form: str) -> Tamper | type[Tamper]:
    if form == "instance":
        return Tamper(counter=counter, hook=hook)
    return type(f"Tamper_{counter}_{hook}", (Tamper,), {"counter": counter, "hook": hook})


MATRIX = {
    (counter, hook, form): Agent(
        name=f"counters-{counter}-{hook}-{form}", model=SCRIPT.model, tools=[echo],
        capabilities=[_tamper(counter, hook, form), Observe], limits=LIMITS,
    )
    for counter in COUNTERS for hook in HOOKS for form in FORMS
}


def _expected(run_step: int, tool_calls: int, tool_retries: dict[str, int]) -> dict[str, Any]:
    return {
        "tool_retries": tool_retries, "output_retries_used": 0, "run_step": run_step,
        "tool_calls": tool_calls, "max_steps": LIMITS.max_steps,
        "output_retries": LIMITS.output_retries,
    }


EXPECTED = [_expected(1, 0, {}), _expected(2, 1, {"echo": 1}), _expected(3, 2, {})]


class Answer(BaseModel):
    """The final answer."""

    value: int


RETRY_SCRIPT = Script([calls(call("always_retry", {}, f"r{i}")) for i in range(1, 4)] + ["x"])
STEPS_SCRIPT = Script([calls(call("echo", {"word": "a"}, "s1")), text("done")])
CALLS_SCRIPT = Script([
    calls(call("echo", {"word": "a"}, "t1")), calls(call("echo", {"word": "b"}, "t2")), "done",
])
OUTPUT_SCRIPT = Script([
    calls(call("final_result", {"value": "not a number"}, f"o{i}", kind="output"))
    for i in range(1, 3)
] + [calls(call("final_result", {"value": 3}, "o3", kind="output"))])

RETRY_AGENT = Agent(name="replenish-tool-retries", model=RETRY_SCRIPT.model,
                    tools=[always_retry], capabilities=[Replenish])
STEPS_AGENT = Agent(name="replenish-steps", model=STEPS_SCRIPT.model, tools=[echo],
                    capabilities=[Replenish], limits=Limits(max_steps=1))
CALLS_AGENT = Agent(name="replenish-tool-calls", model=CALLS_SCRIPT.model, tools=[echo],
                    capabilities=[Replenish], limits=Limits(tool_calls_limit=1))
OUTPUT_AGENT = Agent(name="replenish-output-retries", model=OUTPUT_SCRIPT.model,
                     capabilities=[Replenish], output_type=Answer,
                     limits=Limits(output_retries=1))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    agents = [*MATRIX.values(), RETRY_AGENT, STEPS_AGENT, CALLS_AGENT, OUTPUT_AGENT]
    async with towline_worker(client, agents) as pair:
        yield pair


def _executions(run_id: str) -> list[str]:
    return [call_id for _, rid, call_id in EXECUTIONS if rid == run_id]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("counter", COUNTERS)
async def test_overwriting_a_counter_changes_nothing(
    worker: tuple[Client, str], counter: str, hook: str, form: str
) -> None:
    tclient, queue = worker
    agent = MATRIX[(counter, hook, form)]
    result = await run(tclient, agent, "go", task_queue=queue)

    for observed_hook in HOOKS:
        assert OBSERVED[(result.run_id, observed_hook)] == EXPECTED, observed_hook
    assert result.output == "done"
    assert [r.status for r in returns(result.messages)] == ["retry", "succeeded"]
    assert _executions(result.run_id) == ["c1", "c2"]
    assert [s.run_step for s in SCRIPT.for_agent(agent.name)] == [1, 2, 3]
    final = result.counters
    assert (final.run_step, final.tool_calls, final.tool_retries) == (3, 2, {})
    assert (final.output_retries_used, final.max_steps, final.output_retries) == (0, 6, 2)
    assert final.requests == 3
    assert_paired(result)


async def test_hooks_cannot_replenish_tool_retries(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, RETRY_AGENT, "go", task_queue=queue)
    err = info.value
    assert err.reason == "ToolRetriesExhausted"
    assert err.partial is not None
    assert _executions(err.partial.run_id) == ["r1", "r2"]
    assert [s.run_step for s in RETRY_SCRIPT.seen] == [1, 2]
    assert err.partial.request_count == 2
    assert [r.status for r in returns(err.partial.messages)] == ["retry", "retry"]
    assert_paired(err.partial)


async def test_hooks_cannot_replenish_steps(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, STEPS_AGENT, "go", task_queue=queue)
    err = info.value
    assert err.reason == "MaxStepsExceeded"
    assert err.partial is not None
    assert [s.run_step for s in STEPS_SCRIPT.seen] == [1]
    assert _executions(err.partial.run_id) == ["s1"]
    assert err.partial.counters.run_step == 1
    assert err.partial.request_count == 1
    assert_paired(err.partial)


async def test_hooks_cannot_replenish_tool_calls(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, CALLS_AGENT, "go", task_queue=queue)
    err = info.value
    assert err.reason == "UsageLimitExceeded"
    assert err.partial is not None
    assert _executions(err.partial.run_id) == ["t1"]
    statuses = {r.tool_call_id: r.status for r in returns(err.partial.messages)}
    assert statuses == {"t1": "succeeded", "t2": "not_executed"}
    assert err.partial.counters.tool_calls == 1
    assert_paired(err.partial)


async def test_hooks_cannot_replenish_output_retries(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, OUTPUT_AGENT, "go", task_queue=queue)
    err = info.value
    assert err.reason == "OutputRetriesExhausted"
    assert err.partial is not None
    assert [s.run_step for s in OUTPUT_SCRIPT.seen] == [1, 2]
    assert err.partial.counters.output_retries_used == 2
    assert err.partial.counters.output_retries == 1
    assert err.partial.request_count == 2
    assert_paired(err.partial)
