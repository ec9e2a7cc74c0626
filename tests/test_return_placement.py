"""Every call is answered right after the response that made it, whatever hooks add later.

Providers reject a conversation where a tool call's return does not follow the
call's message directly; hooks that add messages in `after_model` must not break that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, text
from towline import Agent, Middleware, ModelRequest, ModelResponse, RemoveAll, UserPart, tool
from towline.client import run
from towline.messages import Message, ToolReturnPart
from towline.testing import towline_worker


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def assert_adjacent(messages: Sequence[Message]) -> None:
    """Each response's calls are answered by the return-only requests right after it."""
    for i, m in enumerate(messages):
        if not isinstance(m, ModelResponse) or not m.tool_calls:
            continue
        answered: list[str] = []
        j = i + 1
        while j < len(messages) and isinstance(messages[j], ModelRequest) and all(
            isinstance(p, ToolReturnPart) for p in messages[j].parts
        ):
            answered += [p.tool_call_id for p in messages[j].parts]  # type: ignore[union-attr]
            j += 1
        assert sorted(answered) == sorted(c.tool_call_id for c in m.tool_calls), (i, messages)


def note(text_: str) -> ModelRequest:
    return ModelRequest(parts=[UserPart(content=text_)])


def after_adding(update: dict[str, Any], once: list[bool]) -> Middleware:
    def after_model(state: dict[str, Any]) -> dict[str, Any] | None:
        if once:
            return None
        once.append(True)
        return update

    return Middleware("adder", after_model=after_model)


async def _run(client: Client, agent: Agent) -> list[Message]:
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)
    assert_paired(result)
    assert_adjacent(result.messages)
    return result.messages


async def test_returns_precede_a_message_added_by_after_model(client: Client) -> None:
    script = Script([calls(call("ping", {}, "p1")), text("done")])
    agent = Agent(name="placement-tools", model=script.model, tools=[ping],
                  capabilities=[after_adding({"messages": [note("remember")]}, [])])
    messages = await _run(client, agent)
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["ModelRequest", "ModelResponse", "ModelRequest", "ModelRequest", "ModelResponse"]
    assert messages[3].parts[0].content == "remember"  # type: ignore[union-attr]


async def test_not_executed_returns_precede_feedback_of_a_model_jump(client: Client) -> None:
    script = Script([calls(call("ping", {}, "p1")), text("done")])
    update = {"messages": [note("try again without tools")], "jump_to": "model"}
    agent = Agent(name="placement-jump", model=script.model, tools=[ping],
                  capabilities=[after_adding(update, [])])
    messages = await _run(client, agent)
    assert messages[2].parts[0].status == "not_executed"  # type: ignore[union-attr]
    assert messages[3].parts[0].content == "try again without tools"  # type: ignore[union-attr]


async def test_a_response_removed_by_after_model_takes_its_calls_with_it(client: Client) -> None:
    executed: list[str] = []

    @tool
    def effect() -> str:
        """Record an effect."""
        executed.append("ran")
        return "ok"

    script = Script([calls(call("effect", {}, "e1")), text("done")])
    agent = Agent(name="placement-removed", model=script.model, tools=[effect],
                  capabilities=[after_adding({"messages": [RemoveAll(), note("summary")]}, [])])
    messages = await _run(client, agent)
    assert executed == []
    assert [type(m).__name__ for m in messages] == ["ModelRequest", "ModelResponse"]
