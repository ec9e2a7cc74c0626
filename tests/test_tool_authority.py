"""Tool authority: only selected, authorised, valid, unaltered calls ever execute.

The selected tools are a request's executable set (whether the model or an
after-hook made the call); a sub-agent run never executes a tool outside its
ancestor's authority; `before_tool_execute` may rewrite arguments (re-validated)
but changing a call's identity fails the run and executes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, statuses
from towline import (
    Agent,
    Capability,
    ModelRequestState,
    RunInput,
    RunResult,
    ToolCall,
    ToolContext,
    tool,
)
from towline.client import run
from towline.errors import RunError
from towline.testing import towline_worker

EXECUTED: list[tuple[str, str, dict[str, Any]]] = []
"""(run id, tool call id, arguments) of every tool execution (tools run in this process)."""


@tool
def alpha(ctx: ToolContext, n: int) -> int:
    """Double a number."""
    EXECUTED.append((ctx.run_id, ctx.tool_call_id, {"n": n}))
    return 2 * n


@tool
def beta(ctx: ToolContext) -> str:
    """A tool with an effect that must not happen unless selected."""
    EXECUTED.append((ctx.run_id, ctx.tool_call_id, {}))
    return "beta ran"


def _executed(run_id: str) -> list[str]:
    return [call_id for rid, call_id, _ in EXECUTED if rid == run_id]


class OnlyAlpha(Capability):
    """Selects `alpha` alone for every request."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        tools = [d for d in state.params.function_tools if d.name == "alpha"]
        return state.model_copy(update={"params": state.params.model_copy(
            update={"function_tools": tools})})


class AddCalls(Capability):
    """After the first response: calls unselected `beta` and `alpha` with invalid arguments."""

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        assert state.response is not None
        if state.run_step != 1:
            return state
        extra = [call("beta", {}, "added-beta"), call("alpha", {"n": "many"}, "added-alpha")]
        response = state.response.model_copy(update={"parts": [*state.response.parts, *extra]})
        return state.model_copy(update={"response": response})


@dataclass(frozen=True)
class ChangeIdentity(Capability):
    """Changes one field of call `x2`'s identity in `before_tool_execute`."""

    field: str = "tool_call_id"

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        if call.tool_call_id != "x2":
            return call
        changed: dict[str, Any] = {
            "tool_call_id": "forged", "tool_name": "beta", "kind": "output",
            "metadata": {"approved": True},
        }
        return call.model_copy(update={self.field: changed[self.field]})


class BadArgs(Capability):
    """Rewrites the arguments of every call to something the schema rejects."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        return call.model_copy(update={"args": {"n": "not a number"}})


UNSELECTED = Script([calls(call("beta", {}, "b1"), call("alpha", {"n": 2}, "a1")), "done"])
AFTER = Script([calls(call("alpha", {"n": 3}, "a1")), "done"])
ANCESTOR = Script([calls(call("beta", {}, "b1"), call("alpha", {"n": 4}, "a1")), "done"])
IDENTITY = Script([calls(call("alpha", {"n": 1}, "x1"), call("alpha", {"n": 2}, "x2")), "done"])
REWRITE = Script([calls(call("alpha", {"n": 5}, "v1")), "done"])

UNSELECTED_AGENT = Agent(name="authority-unselected", model=UNSELECTED.model,
                         tools=[alpha, beta], capabilities=[OnlyAlpha])
AFTER_AGENT = Agent(name="authority-after-hook", model=AFTER.model, tools=[alpha, beta],
                    capabilities=[OnlyAlpha, AddCalls])
ANCESTOR_AGENT = Agent(name="authority-ancestor", model=ANCESTOR.model, tools=[alpha, beta])
IDENTITY_AGENTS = {
    f: Agent(name=f"authority-identity-{f}", model=IDENTITY.model, tools=[alpha, beta],
             capabilities=[ChangeIdentity(field=f)])
    for f in ("tool_call_id", "tool_name", "kind", "metadata")
}
REWRITE_AGENT = Agent(name="authority-bad-args", model=REWRITE.model, tools=[alpha],
                      capabilities=[BadArgs])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    agents = [UNSELECTED_AGENT, AFTER_AGENT, ANCESTOR_AGENT, REWRITE_AGENT,
              *IDENTITY_AGENTS.values()]
    async with towline_worker(client, agents) as pair:
        yield pair


async def test_unselected_tool_is_not_executed(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, UNSELECTED_AGENT, "go", task_queue=queue)
    assert [t.name for t in UNSELECTED.seen[0].info.tools] == ["alpha"]
    assert _executed(result.run_id) == ["a1"]
    assert statuses(result.messages) == {"b1": "denied", "a1": "succeeded"}
    assert result.counters.tool_calls == 1
    assert result.output == "done"
    assert_paired(result)


async def test_after_hook_calls_are_checked_like_the_models(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, AFTER_AGENT, "go", task_queue=queue)
    assert _executed(result.run_id) == ["a1"]
    assert statuses(result.messages) == {
        "a1": "succeeded", "added-beta": "denied", "added-alpha": "validation_error",
    }
    assert result.output == "done"
    assert_paired(result)


async def test_sub_agent_never_gains_tools_its_ancestor_lacked(
    worker: tuple[Client, str],
) -> None:
    tclient, queue = worker
    handle = await tclient.start_workflow(
        "AgentRun",
        RunInput(agent=ANCESTOR_AGENT.name, prompt="go", allowed_tools=["alpha"]),
        id="authority-ancestor-run", task_queue=queue, result_type=RunResult,
    )
    result = await handle.result()
    assert [t.name for t in ANCESTOR.seen[0].info.tools] == ["alpha"]
    assert _executed(result.run_id) == ["a1"]
    assert statuses(result.messages) == {"b1": "denied", "a1": "succeeded"}
    assert_paired(result)


@pytest.mark.parametrize("field", ["tool_call_id", "tool_name", "kind", "metadata"])
async def test_changing_call_identity_fails_and_executes_nothing(
    worker: tuple[Client, str], field: str
) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, IDENTITY_AGENTS[field], "go", task_queue=queue)
    err = info.value
    assert err.reason == "ToolCallIdentityChanged"
    assert err.partial is not None
    assert _executed(err.partial.run_id) == []
    assert statuses(err.partial.messages) == {"x1": "not_executed", "x2": "not_executed"}
    assert err.partial.counters.tool_calls == 0
    assert [s.agent for s in IDENTITY.seen].count(IDENTITY_AGENTS[field].name) == 1
    assert_paired(err.partial)


async def test_invalid_rewritten_arguments_have_no_effect(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, REWRITE_AGENT, "go", task_queue=queue)
    assert _executed(result.run_id) == []
    assert statuses(result.messages) == {"v1": "validation_error"}
    assert result.counters.tool_calls == 0
    # The run goes on: the model is asked again and answers.
    assert [s.run_step for s in REWRITE.seen] == [1, 2]
    assert result.output == "done"
    assert_paired(result)
