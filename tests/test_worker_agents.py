"""What a worker serves is its own, and what hooks are given cannot change it.

Agents are resolved per worker (the plugin that built it), never in a process-wide
registry: two workers in one process, or a worker and a `Replayer`, may hold different
agents under one name. And hooks get read-only views of the shared `Agent`: a run
cannot change its inventory, state schema, tools or capabilities for the runs after it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from towline import Agent, Capability, Middleware, ModelRequestState, TowlinePlugin, tool
from towline.client import run
from towline.errors import RunError
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker
from towline.workflows import AgentRun, current_run


def answering(text: str) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> str:
        return text

    return FunctionModel(answer, model_name=f"twin-{text}")


async def test_workers_and_a_replayer_in_one_process_keep_their_agents_apart(
    client: Client,
) -> None:
    a = Agent(name="twin", model=answering("a"))
    b = Agent(name="twin", model=answering("b"))
    async with towline_worker(client, [a]) as (ta, qa), towline_worker(client, [b]) as (tb, qb):
        first = await run(ta, "twin", "hi", task_queue=qa)
        assert (first.output, (await run(tb, "twin", "hi", task_queue=qb)).output) == ("a", "b")
        history = await ta.get_workflow_handle(first.run_id).fetch_history()

        # A Replayer made in the same process, with the other "twin": it uses its own.
        mine = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin([a])])
        theirs = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin([b])])
        assert (await mine.replay_workflow(history, raise_on_replay_failure=False)) \
            .replay_failure is None
        refused = (await theirs.replay_workflow(history, raise_on_replay_failure=False)) \
            .replay_failure
        assert refused is not None and "another version of agent 'twin'" in str(refused)

        # ... and the live workers still serve their own.
        assert (await run(ta, "twin", "again", task_queue=qa)).output == "a"
        assert (await run(tb, "twin", "again", task_queue=qb)).output == "b"


@tool
def note(text: str) -> str:
    """Take a note."""
    return text


@tool
def intruder(text: str) -> str:
    """Not part of the agent."""
    return text


tried: list[dict[str, str]] = []


class Meddler(Capability):
    """Tries every way a hook could change the shared agent; records what happened."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        agent = current_run().agent_run.agent
        attempts: dict[str, Any] = {
            "inventory": lambda: agent.inventory.__setitem__("intruder", intruder),  # pyright: ignore[reportAttributeAccessIssue]
            "state schema": lambda: agent.state_schema.__setitem__("extra", 1),  # pyright: ignore[reportAttributeAccessIssue]
            "state default": lambda: agent.state_schema["notes"][0].append("leaked"),
            "tools": lambda: agent.tools.append(intruder),  # pyright: ignore[reportAttributeAccessIssue]
            "capabilities": lambda: agent.capabilities.append(self),  # pyright: ignore[reportAttributeAccessIssue]
            "agent field": lambda: setattr(agent, "tools", (intruder,)),
            "tool field": lambda: setattr(agent.tools[0], "max_retries", 9),
            "tool metadata": lambda: agent.tools[0].metadata.__setitem__("k", 1),  # pyright: ignore[reportAttributeAccessIssue]
        }
        outcome: dict[str, str] = {}
        for what, attempt in attempts.items():
            try:
                attempt()
                outcome[what] = "changed"
            except (TypeError, AttributeError, dataclasses.FrozenInstanceError) as e:
                outcome[what] = type(e).__name__
        tried.append(outcome)
        return state


def see_tools(messages: list[Message], info: ModelInfo) -> str:
    return ",".join(sorted(t.name for t in info.tools))


async def test_hooks_cannot_change_the_shared_agent_for_later_runs(client: Client) -> None:
    notes = Middleware("notes", state_schema={"notes": [[]]})
    agent = Agent(name="meddled", model=FunctionModel(see_tools, model_name="meddled"),
                  tools=[note], capabilities=[Meddler(), notes])
    async with towline_worker(client, [agent]) as (tc, queue):
        first = await run(tc, agent, "one", task_queue=queue)
        second = await run(tc, agent, "two", task_queue=queue)
    assert len(tried) == 2
    assert all(v != "changed" for v in tried[0].values()), tried[0]
    assert tried[0] == tried[1]
    assert first.output == second.output == "note"  # the inventory is what it was
    assert second.state["notes"] == [[]]  # every run starts from the defaults as defined
    assert dict(agent.tools[0].metadata) == {} and agent.tools[0].max_retries == 1


class Counting:
    """A capability (a plain class, not frozen) whose hook keeps a count on itself."""

    def __init__(self) -> None:
        self.calls = 0

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        self.calls += 1
        return state


async def test_a_capability_that_changes_itself_fails_the_run_and_is_put_back(
    client: Client,
) -> None:
    counting = Counting()
    agent = Agent(name="self-changing", model=answering("x"),
                  capabilities=[counting])  # pyright: ignore[reportArgumentType]
    async with towline_worker(client, [agent]) as (tc, queue):
        for _ in range(2):
            with pytest.raises(RunError) as caught:
                await run(tc, agent, "hi", task_queue=queue)
            assert caught.value.reason == "CapabilityViolation"
            assert caught.value.message.startswith(
                "Counting.before_model_request changed its capability's configuration (calls)")
            assert counting.calls == 0  # put back: the next run sees it as the worker started
