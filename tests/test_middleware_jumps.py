"""`after_model` jumps: `"model"`, `"tools"` and `"end"` override the agent's routing.

The jump key is reset every turn and never appears in the run state.
"""

from __future__ import annotations

from typing import Any

from mw_helpers import (
    Recorder,
    activity_types,
    calls,
    fail_agent,
    run_agent,
    text,
    texts_of,
    tool_returns,
)
from temporalio.client import Client

from towline import Agent, Middleware, ModelResponse, tool


def _completion_gate(state: dict[str, Any]) -> dict[str, Any] | None:
    """Bounce the first answer back for another pass (once)."""
    if state["bounced"]:
        return None
    return {"jump_to": "model", "bounced": True}


async def test_model_jump_loops_exactly_once_more(client: Client) -> None:
    states_seen: list[dict[str, Any]] = []

    def observe(state: dict[str, Any]) -> None:
        states_seen.append({k: v for k, v in state.items() if k != "messages"})

    model = Recorder.script("mw-jump-model-model", text("draft"), text("final"), text("extra"))
    agent = Agent(name="mw-jump-model", model=model.model(), capabilities=[
        Middleware("observer", before_model=observe),
        Middleware("gate", after_model=_completion_gate, state_schema={"bounced": False}),
    ])
    result, events = await run_agent(client, agent, "write it")

    assert result.output == "final"
    assert len(model.seen) == 2
    assert activity_types(events) == ["towline.model_request"] * 2
    assert result.counters.run_step == 2 and result.counters.requests == 2
    # the bounced draft stays in the history the second request sees
    assert texts_of(model.seen[1].messages) == ["write it", "draft"]
    # the jump key never reaches any state: not what hooks see, not the final state
    assert states_seen == [{"bounced": False}, {"bounced": True}]
    assert result.state == {"bounced": True}
    assert "jump_to" not in result.state


async def test_tools_jump_without_tools_ends_the_run_cleanly(client: Client) -> None:
    def to_tools(state: dict[str, Any]) -> dict[str, Any]:
        return {"jump_to": "tools"}

    model = Recorder.script("mw-jump-tools-model", text("an answer"))
    agent = Agent(name="mw-jump-tools", model=model.model(),
                  capabilities=[Middleware("router", after_model=to_tools)])
    result, events = await run_agent(client, agent)

    assert result.output == "an answer"
    assert len(model.seen) == 1
    assert activity_types(events) == ["towline.model_request"]
    assert "jump_to" not in result.state


async def test_tools_jump_on_an_empty_response_ends_instead_of_retrying(client: Client) -> None:
    def to_tools(state: dict[str, Any]) -> dict[str, Any]:
        return {"jump_to": "tools"}

    # without the jump, an empty response asks the model again (an output retry)
    model = Recorder.script("mw-jump-tools-empty-model", ModelResponse(parts=[]))
    agent = Agent(name="mw-jump-tools-empty", model=model.model(),
                  capabilities=[Middleware("router", after_model=to_tools)])
    result, _ = await run_agent(client, agent)

    assert result.output is None
    assert len(model.seen) == 1
    assert result.counters.output_retries_used == 0


async def test_tools_jump_with_pending_calls_runs_them(client: Client) -> None:
    ran: list[int] = []

    @tool
    def work(n: int) -> int:
        """Do some work."""
        ran.append(n)
        return n * 2

    def to_tools_once(state: dict[str, Any]) -> dict[str, Any] | None:
        return {"jump_to": "tools"} if len(state["messages"]) == 2 else None

    model = Recorder.script("mw-jump-tools-calls-model", calls(("work", {"n": 3})), text("ok"))
    agent = Agent(name="mw-jump-tools-calls", model=model.model(), tools=[work],
                  capabilities=[Middleware("router", after_model=to_tools_once)])
    result, _ = await run_agent(client, agent)

    assert result.output == "ok"
    assert ran == [3]
    assert [(r.status, r.content) for r in tool_returns(result.messages)] == [("succeeded", 6)]


async def test_end_jump_stops_before_tools_and_pairs_every_call(client: Client) -> None:
    ran: list[str] = []

    @tool
    def launch() -> str:
        """Must not run: the gate ends the run first."""
        ran.append("launch")
        return "launched"

    def stop(state: dict[str, Any]) -> dict[str, Any]:
        return {"jump_to": "end"}

    model = Recorder.script("mw-jump-end-model", calls(("launch", {})))
    agent = Agent(name="mw-jump-end", model=model.model(), tools=[launch],
                  capabilities=[Middleware("stopper", after_model=stop)])
    result, events = await run_agent(client, agent)

    assert result.output is None  # the response had no text
    assert ran == []
    assert len(model.seen) == 1
    assert "towline.tool.launch" not in activity_types(events)
    assert [r.status for r in tool_returns(result.messages)] == ["not_executed"]
    assert result.counters.tool_calls == 0


async def test_jump_in_before_model_is_a_violation(client: Client) -> None:
    def early(state: dict[str, Any]) -> dict[str, Any]:
        return {"jump_to": "end"}

    model = Recorder.script("mw-jump-early-model", "never")
    agent = Agent(name="mw-jump-early", model=model.model(),
                  capabilities=[Middleware("early", before_model=early)])
    err = await fail_agent(client, agent)

    assert err.reason == "CapabilityViolation"
    assert "early.before_model" in err.message
    assert model.seen == []
