"""Contributed tools and state, `before_model` updates, and invalid updates.

A middleware's `tools` join the agent's inventory and execute as activities;
its `state_schema` keys are run state, visible in `RunResult.state` and the
`state` query while the run is running. A `before_model` update is applied to
the working state (the model sees it) and persisted. Within a turn every
contributed key other than `messages` and `llm_usage` is last-write-wins; a
custom reducer is applied once, when the turn commits.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Any

import pytest
from mw_helpers import (
    Recorder,
    activity_types,
    calls,
    fail_agent,
    run_agent,
    run_with_handle,
    text,
    texts_of,
    tool_returns,
    user,
)
from temporalio.client import Client

from towline import Agent, Middleware, ModelCallRequest, ModelResponse, tool
from towline.capabilities import NextModelCall
from towline.testing import towline_worker

_started = asyncio.Event()
_release = asyncio.Event()


@tool
async def slow_lookup(key: str) -> str:
    """A contributed tool that waits until the test lets it finish."""
    _started.set()
    await asyncio.wait_for(_release.wait(), timeout=20)
    return f"looked up {key}"


def _count_turns(state: dict[str, Any]) -> dict[str, Any]:
    return {"turns": 1, "last_seen_turns": state["turns"]}


async def test_contributed_tools_and_state_are_merged_and_usable(client: Client) -> None:
    _started.clear()
    _release.clear()
    model = Recorder.script(
        "mw-state-contrib-model", calls(("slow_lookup", {"key": "k1"})), text("done")
    )
    mw = Middleware(
        "counter", before_model=_count_turns, tools=[slow_lookup],
        state_schema={"turns": (0, operator.add), "last_seen_turns": -1},
    )
    agent = Agent(name="mw-state-contrib", model=model.model(), capabilities=[mw])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await run_with_handle(tclient, queue, agent)
        await asyncio.wait_for(_started.wait(), timeout=20)
        # the tool is executing: turn 1 is committed, its state is visible in the query
        running = await handle.query("state")
        _release.set()
        result = await handle.result()
        events = list((await handle.fetch_history()).events)

    assert running["status"] == "running"
    assert running["state"] == {"turns": 1, "last_seen_turns": 0}
    assert model.seen[0].tool_names == ["slow_lookup"]
    assert result.output == "done"
    assert result.state == {"turns": 2, "last_seen_turns": 1}
    assert [(r.tool_name, r.status, r.content) for r in tool_returns(result.messages)] == [
        ("slow_lookup", "succeeded", "looked up k1"),
    ]
    assert activity_types(events).count("towline.tool.slow_lookup") == 1


async def test_before_model_update_reaches_the_model_and_is_persisted(client: Client) -> None:
    wrapped_state: list[dict[str, Any]] = []

    def inject(state: dict[str, Any]) -> dict[str, Any] | None:
        if state["injected"]:
            return None
        return {"messages": [user("note from middleware")], "injected": True, "topic": "tides"}

    async def wrap(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        wrapped_state.append(dict(request.state))
        return await next(request)

    model = Recorder.script("mw-state-before-model", calls(("echo", {"x": "a"})), text("ok"))

    @tool
    def echo(x: str) -> str:
        """Echo."""
        return x

    mw = Middleware("injector", before_model=inject, wrap_model_call=wrap,
                    state_schema={"injected": False, "topic": ""})
    agent = Agent(name="mw-state-before", model=model.model(), tools=[echo],
                  instructions="Be brief.", capabilities=[mw])
    result, _ = await run_agent(client, agent, "the prompt")

    # the model saw the injected message on the first request, after the prompt
    assert texts_of(model.seen[0].messages) == ["Be brief.", "the prompt", "note from middleware"]
    # and the state the model call was wrapped with carried the update
    assert wrapped_state[0] == {"injected": True, "topic": "tides"}
    # persisted: the returned history holds it (once, with an id), as does the next request
    notes = [m for m in result.messages if texts_of([m]) == ["note from middleware"]]
    assert len(notes) == 1 and notes[0].id
    assert texts_of(model.seen[1].messages)[:3] == ["Be brief.", "the prompt", "note from middleware"]
    assert result.messages[1] == notes[0]
    assert result.state == {"injected": True, "topic": "tides"}


async def test_same_custom_reducer_key_in_one_turn_keeps_last_write_reduced_once(
    client: Client,
) -> None:
    seen_by_b: list[int] = []

    def write_a(state: dict[str, Any]) -> dict[str, Any]:
        return {"total": 1}

    def write_b(state: dict[str, Any]) -> dict[str, Any]:
        seen_by_b.append(state["total"])
        return {"total": 10}

    model = Recorder.script("mw-state-reducer-model", calls(("noop", {})), text("done"))

    @tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    agent = Agent(
        name="mw-state-reducer", model=model.model(), tools=[noop],
        capabilities=[
            Middleware("a", before_model=write_a, state_schema={"total": (0, operator.add)}),
            Middleware("b", before_model=write_b),
        ],
    )
    result, _ = await run_agent(client, agent)

    # two turns; each commits only b's write (a's is overwritten), reduced once: 0+10+10.
    # (reduced per hook it would be 22; without the reducer, 10)
    assert result.state == {"total": 20}
    # within a turn b sees a's raw write, not a reduced value
    assert seen_by_b == [1, 1]


async def test_mutating_the_view_changes_nothing(client: Client) -> None:
    def mutate(state: dict[str, Any]) -> None:
        state["notes"].append("sneaky")
        state["flag"] = True

    model = Recorder.script("mw-state-view-model", "done")
    agent = Agent(name="mw-state-view", model=model.model(), capabilities=[
        Middleware("mutator", before_model=mutate, after_model=mutate,
                   state_schema={"notes": [], "flag": False}),
    ])
    result, _ = await run_agent(client, agent)
    assert result.state == {"notes": [], "flag": False}


def _unknown_key(state: dict[str, Any]) -> dict[str, Any]:
    return {"not_declared": 1}


def _not_a_mapping(state: dict[str, Any]) -> Any:
    return ["not", "a", "mapping"]


def _bad_jump(state: dict[str, Any]) -> dict[str, Any]:
    return {"jump_to": "somewhere"}


def _raises(state: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("hook broke")


@pytest.mark.parametrize(
    ("hook", "fn", "expected"),
    [
        ("before_model", _unknown_key, "'not_declared'"),
        ("before_model", _not_a_mapping, "not an update mapping"),
        ("after_model", _bad_jump, "'somewhere'"),
        ("before_model", _raises, "hook broke"),
    ],
)
async def test_invalid_update_fails_the_run_naming_middleware_and_hook(
    client: Client, hook: str, fn: Any, expected: str
) -> None:
    ran: list[str] = []

    @tool
    def side_effect() -> str:
        """Must never run."""
        ran.append("tool")
        return "ran"

    def later(state: dict[str, Any]) -> None:
        ran.append("later hook")

    model = Recorder.script(f"mw-invalid-{hook}-{fn.__name__}", calls(("side_effect", {})))
    # `bad_mw` runs before `later_mw`: listed first for before_model (first → last),
    # listed last for after_model (last → first)
    if hook == "before_model":
        order = [Middleware("bad_mw", before_model=fn), Middleware("later_mw", before_model=later)]
    else:
        order = [Middleware("later_mw", after_model=later), Middleware("bad_mw", after_model=fn)]
    agent = Agent(name=f"mw-invalid-{hook}-{fn.__name__}", model=model.model(),
                  tools=[side_effect], capabilities=order)
    err = await fail_agent(client, agent)

    assert err.reason == "CapabilityViolation"
    assert f"bad_mw.{hook}" in err.message
    assert expected in err.message
    assert ran == []  # no later hook and no tool I/O
    assert err.partial is not None
    assert err.partial.request_count == (0 if hook == "before_model" else 1)
    assert len(model.seen) == err.partial.request_count

