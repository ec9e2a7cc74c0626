"""TodoList in real runs: `write_todos` updates the run's `todos` state.

The todos reach `RunResult.state` and the `state` query (while the run waits and
after it ended, replayed); the instruction and the current list are appended
to the request's instructions; invalid todo lists are rejected without touching
the state. Also covers the engine hook it relies on: a tool's `ToolResult.state`
update is committed with the key's reducer, and an undeclared key fails the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import Agent, Middleware, ToolResult, tool
from towline.capabilities import TodoList
from towline.capabilities.todo_list import TODO_INSTRUCTIONS
from towline.client import run, start_run
from towline.errors import RunError
from towline.messages import Message, ModelRequest, SystemPart
from towline.results import RunResult
from towline.testing import towline_worker

PLAN = [{"content": "read the docs", "status": "in_progress"},
        {"content": "write the code", "status": "pending"}]
PROGRESS = [{"content": "read the docs", "status": "completed"},
            {"content": "write the code", "status": "in_progress"}]


def instructions(messages: list[Message]) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], SystemPart)
    return first.parts[0].content


async def _wait_for_status(handle: Any, status: str) -> dict[str, Any]:
    for _ in range(200):
        state: dict[str, Any] = await handle.query("state")
        if state.get("status") == status:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never reached status {status!r}")


async def test_write_todos_updates_the_run_state_seen_in_results_and_queries(
    client: Client,
) -> None:
    script = Script([
        calls(call("write_todos", {"todos": PLAN}, "t1")),
        calls(call("write_todos", {"todos": PROGRESS}, "t2")),
        text("working on it"),
    ])
    agent = Agent(name="todo-run", model=script.model, instructions="You are a planner.",
                  capabilities=[TodoList()])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "plan the work", task_queue=queue, session=True)
        waiting = await _wait_for_status(handle, "waiting")  # the session waits for `send`
        await handle.signal("end")
        result: RunResult = await handle.result()
        replayed: dict[str, Any] = await handle.query("state")  # after the end: replayed

    assert waiting["state"]["todos"] == PROGRESS
    assert result.state["todos"] == PROGRESS
    assert replayed["state"]["todos"] == PROGRESS

    # the tool was offered, and the instructions carry the hint and the current list
    assert [s.tool_names for s in script.seen] == [["write_todos"]] * 3
    first, second, third = (instructions(s.messages) for s in script.seen)
    assert first == f"You are a planner.\n\n{TODO_INSTRUCTIONS}"
    assert second.endswith("Current todo list:\n- [in_progress] read the docs\n"
                           "- [pending] write the code")
    assert third.endswith("- [completed] read the docs\n- [in_progress] write the code")
    # the tool ran in the workflow: its returns are recorded like any tool's
    assert [(r.status, str(r.content).splitlines()[0]) for r in returns(result.messages)] == [
        ("succeeded", "Todo list updated:"), ("succeeded", "Todo list updated:")]
    assert result.counters.tool_calls == 2
    assert_paired(result)


async def test_an_invalid_todo_list_is_a_validation_error_and_keeps_the_state(
    client: Client,
) -> None:
    script = Script([
        calls(call("write_todos", {"todos": PLAN}, "t1")),
        calls(call("write_todos", {"todos": [{"content": "x", "status": "someday"}]}, "t2")),
        text("ok"),
    ])
    agent = Agent(name="todo-invalid", model=script.model, capabilities=[TodoList()])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "plan", task_queue=queue)
    assert [r.status for r in returns(result.messages)] == ["succeeded", "validation_error"]
    assert result.state["todos"] == PLAN


# --- the engine hook: ToolResult.state ------------------------------------------------


@tool
def tally(n: int) -> ToolResult:
    """Add n to the tally (an activity tool that updates run state)."""
    return ToolResult(content=f"+{n}", state={"tally": n, "last": n})


@tool
def scribble() -> ToolResult:
    """Writes a state key nobody declared."""
    return ToolResult(content="done", state={"undeclared": 1})


def _add(old: Any, new: Any) -> Any:
    return (old or 0) + new


COUNTING = Middleware("counting", state_schema={"tally": (0, _add), "last": None})


async def test_a_tool_state_update_is_committed_with_the_key_reducer(client: Client) -> None:
    script = Script([
        calls(call("tally", {"n": 2}, "a"), call("tally", {"n": 5}, "b")),
        calls(call("tally", {"n": 1}, "c")),
        text("ok"),
    ])
    agent = Agent(name="todo-tally", model=script.model, tools=[tally],
                  capabilities=[COUNTING])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "count", task_queue=queue)
    # reducer applied per call, in call order; other keys last-write-wins
    assert result.state == {"tally": 8, "last": 1}
    assert result.counters.tool_calls == 3


async def test_a_tool_writing_an_undeclared_key_fails_the_run(client: Client) -> None:
    script = Script([calls(call("scribble", {}, "s")), text("never")])
    agent = Agent(name="todo-undeclared", model=script.model, tools=[scribble],
                  capabilities=[COUNTING])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "scribble", task_queue=queue)
    assert info.value.reason == "CapabilityViolation"
    assert "undeclared" in info.value.message
    partial = info.value.partial
    assert partial is not None
    # the tool did run: its result is recorded; the model is not asked again
    assert [r.status for r in returns(partial.messages)] == ["succeeded"]
    assert "undeclared" not in partial.state
    assert len(script.seen) == 1
