"""Subagent in real runs: a child AgentRun workflow under its parent's authority."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, Usage, tool
from towline.capabilities import Subagent
from towline.client import run
from towline.errors import ConfigurationError
from towline.messages import Message
from towline.models import FunctionModel, ModelHTTPError, ModelInfo
from towline.testing import towline_worker

secret_runs: list[str] = []

PARENT_USAGE = Usage(requests=1, input_tokens=10, output_tokens=5)
CHILD_USAGE = Usage(requests=1, input_tokens=300, output_tokens=40)


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool
def secret(q: str) -> str:
    """A tool only the child has."""
    secret_runs.append(q)
    return "leaked"


def returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)]


def child_model(name: str, seen: list[ModelInfo]) -> FunctionModel:
    """Step 1 calls `secret` and `lookup`; step 2 reports the statuses it got."""

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(info)
        if len(seen) == 1:
            return ModelResponse(parts=[
                ToolCallPart(tool_name="secret", args={"q": "x"}, tool_call_id="c1"),
                ToolCallPart(tool_name="lookup", args={"q": "y"}, tool_call_id="c2"),
            ])
        return ", ".join(f"{r.tool_name}:{r.status}" for r in returns(messages))

    return FunctionModel(answer, model_name=name, usage=CHILD_USAGE)


def parent_model(name: str, seen: list[list[Message]]) -> FunctionModel:
    """Step 1 delegates; step 2 answers with the delegation's return."""

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(messages)
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart(
                tool_name="task", args={"prompt": "research y"}, tool_call_id="p1")])
        ret = returns(messages)[-1]
        return f"{ret.status}: {ret.content}"

    return FunctionModel(answer, model_name=name, usage=PARENT_USAGE)


async def test_child_is_limited_to_parent_authority_and_its_usage_is_folded(
    client: Client,
) -> None:
    child_seen: list[ModelInfo] = []
    parent_seen: list[list[Message]] = []
    child = Agent(name="sub-child", model=child_model("sub-child-model", child_seen),
                  tools=[lookup, secret])
    parent = Agent(name="sub-parent", model=parent_model("sub-parent-model", parent_seen),
                   tools=[lookup], capabilities=[Subagent(child)])
    secret_runs.clear()
    async with towline_worker(client, [parent]) as (tc, queue):
        result = await run(tc, parent, "delegate it", task_queue=queue)
        child_handle = tc.get_workflow_handle(f"{result.run_id}/p1")
        child_history = await child_handle.query("messages")

    # the child ran as a child workflow; its tool `secret` was never offered nor executed
    assert [sorted(t.name for t in info.tools) for info in child_seen] == [["lookup"]] * 2
    assert secret_runs == []
    assert result.output == "succeeded: secret:denied, lookup:succeeded"
    assert len(child_history) == 4
    # the child's usage is in the parent's ledger: two parent requests plus two child requests
    tokens = 2 * PARENT_USAGE.total_tokens + 2 * CHILD_USAGE.total_tokens
    assert result.counters.input_tokens + result.counters.output_tokens == tokens
    assert result.usage.total_tokens == tokens
    assert result.counters.requests == 2  # the parent's own model requests
    assert [(r.tool_name, r.status) for r in returns(result.messages)] == [("task", "succeeded")]


async def test_a_child_failure_is_a_failed_tool_return(client: Client) -> None:
    def broken(messages: list[Message], info: ModelInfo) -> ModelResponse:
        if len(messages) == 1:  # one good request, then the child's model fails for good
            return ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"q": "z"})])
        raise ModelHTTPError(400, "bad request")

    parent_seen: list[list[Message]] = []
    child = Agent(name="sub-broken-child", tools=[lookup],
                  model=FunctionModel(broken, model_name="sub-broken", usage=CHILD_USAGE))
    parent = Agent(name="sub-broken-parent", model=parent_model("sub-broken-parent-model",
                                                                 parent_seen),
                   capabilities=[Subagent(child, name="task", description="Delegate.")])
    async with towline_worker(client, [parent]) as (tc, queue):
        result = await run(tc, parent, "delegate it", task_queue=queue)

    expected = "failed: sub-agent 'sub-broken-child' failed (ModelRequestFailed)"
    assert result.output.startswith(expected)
    assert [(r.tool_name, r.status) for r in returns(result.messages)] == [("task", "failed")]
    assert result.counters.run_step == 2
    # what the failed child spent before failing still reaches the parent's ledger
    tokens = 2 * PARENT_USAGE.total_tokens + CHILD_USAGE.total_tokens
    assert result.counters.input_tokens + result.counters.output_tokens == tokens


def test_configuration() -> None:
    child = Agent(name="sub-config-child")
    cap = Subagent(child, name="research")
    assert [t.name for t in cap.tools] == ["research"]
    assert cap.tools[0].in_workflow
    assert "sub-config-child" in cap.tools[0].description
    parent = Agent(name="sub-config-parent", capabilities=[cap])
    assert [a.name for a in parent.all_agents()] == ["sub-config-parent", "sub-config-child"]
    with pytest.raises(ConfigurationError):
        Subagent("not an agent")  # type: ignore[arg-type]
