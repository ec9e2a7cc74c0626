"""Invalid model-hook results fail the run with `CapabilityViolation`; nothing is repaired.

A hook that returns None, an empty dict, a state whose agent is removed, a state
missing a counter, replaces an internal field, or raises, fails the run: later
hooks do not run, no tool executes, and a failing before-hook makes no model
request (real runs on the dev server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls
from towline import Agent, Capability, ModelRequestState, ToolContext, Usage, tool
from towline.client import run
from towline.errors import RunError
from towline.testing import towline_worker

HOOKS = ("before_model_request", "after_model_request")

EXECUTED: list[str] = []
"""Run ids of every execution of `effect` (tools run in this process)."""
LATER: list[tuple[str, str]] = []
"""(run id, hook) of every call of the capability after the broken one."""


@tool
def effect(ctx: ToolContext) -> str:
    """A tool with an effect the tests look for."""
    EXECUTED.append(ctx.run_id)
    return "done"


def _without(state: ModelRequestState, field: str) -> ModelRequestState:
    values = {k: v for k, v in state.__dict__.items() if k != field}
    return ModelRequestState.model_construct(**values)


def _raise(state: ModelRequestState) -> ModelRequestState:
    raise RuntimeError("hook bug")


BAD: dict[str, Callable[[ModelRequestState], Any]] = {
    "none": lambda state: None,
    "empty_dict": lambda state: {},
    "agent_removed": lambda state: state.model_copy(update={"agent": None}),
    "missing_counter": lambda state: _without(state, "tool_calls"),
    "run_id_replaced": lambda state: state.model_copy(update={"run_id": "someone-else"}),
    "usage_replaced": lambda state: state.model_copy(update={"usage": Usage(input_tokens=1)}),
    "raises": _raise,
}


@dataclass(frozen=True)
class Broken(Capability):
    """Returns an invalid result (or raises) from one model hook."""

    kind: str = "none"
    hook: str = "before_model_request"

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return BAD[self.kind](state) if self.hook == "before_model_request" else state

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return BAD[self.kind](state) if self.hook == "after_model_request" else state


class Later(Capability):
    """Records that it ran."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        LATER.append((state.run_id, "before_model_request"))
        return state

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        LATER.append((state.run_id, "after_model_request"))
        return state


SCRIPT = Script([calls(call("effect", {}, "e1")), "done"])

AGENTS = {
    (kind, hook): Agent(
        name=f"violation-{kind}-{hook}", model=SCRIPT.model, tools=[effect],
        capabilities=[Broken(kind=kind, hook=hook), Later],
    )
    for kind in BAD for hook in HOOKS
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    async with towline_worker(client, list(AGENTS.values())) as pair:
        yield pair


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("kind", list(BAD))
async def test_invalid_hook_result_fails_the_run(
    worker: tuple[Client, str], kind: str, hook: str
) -> None:
    tclient, queue = worker
    agent = AGENTS[(kind, hook)]
    with pytest.raises(RunError) as info:
        await run(tclient, agent, "go", task_queue=queue)
    err = info.value
    assert err.reason == "CapabilityViolation"
    assert "Broken" in err.message and hook in err.message
    partial = err.partial
    assert partial is not None
    run_id = partial.run_id
    assert run_id not in EXECUTED
    assert (run_id, hook) not in LATER
    requests = SCRIPT.for_agent(agent.name)
    if hook == "before_model_request":
        assert requests == []
        assert partial.request_count == 0
        assert (run_id, "after_model_request") not in LATER
    else:
        assert [s.run_step for s in requests] == [1]
        assert partial.request_count == 1
        assert (run_id, "before_model_request") in LATER
    assert partial.counters.tool_calls == 0
    assert_paired(partial)
