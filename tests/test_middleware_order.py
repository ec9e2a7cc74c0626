"""The order of one turn: middleware hooks, capability hooks, the model and the tools.

docs/concepts.md, "One turn is": `before_model` (first → last) →
`before_model_request` → `wrap_model_call` chain (first outermost) around the
model activity → usage merged → `after_model_request` → `after_model` (last →
first) → commit and persist → tool admission → `before_tool_execute` → tool
activity → `after_tool_execute`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from mw_helpers import Recorder, activity_types, calls, run_agent, text, tool_returns
from temporalio.client import Client

from towline import (
    Agent,
    Capability,
    ConfigurationError,
    Middleware,
    ModelCallRequest,
    ModelRequestState,
    ModelResponse,
    ToolCall,
    ToolContext,
    ToolReturn,
    tool,
)
from towline.capabilities import NextModelCall
from towline.messages import Message
from towline.models import ModelInfo


def _recording_middleware(name: str, log: list[str]) -> Middleware:
    def before(state: dict[str, Any]) -> None:
        log.append(f"before {name}")

    async def wrap(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        log.append(f"wrap {name} >")
        response = await next(request)
        log.append(f"wrap {name} <")
        return response

    def after(state: dict[str, Any]) -> None:
        log.append(f"after {name}")

    return Middleware(name, before_model=before, wrap_model_call=wrap, after_model=after)


async def test_two_middlewares_run_in_stack_order(client: Client) -> None:
    log: list[str] = []

    def answer(i: int, messages: list[Message], info: ModelInfo) -> str:
        log.append("model")
        return "done"

    model = Recorder("mw-order-model", answer)
    agent = Agent(
        name="mw-order-two",
        model=model.model(),
        capabilities=[_recording_middleware("a", log), _recording_middleware("b", log)],
    )
    result, _ = await run_agent(client, agent)
    assert result.output == "done"
    assert log == [
        "before a", "before b",
        "wrap a >", "wrap b >", "model", "wrap b <", "wrap a <",
        "after b", "after a",
    ]


_COMBINED: list[str] = []


@tool
def probe(x: int) -> int:
    """Record that the tool ran."""
    _COMBINED.append("tool activity")
    return x + 1


class Observer(Capability):
    """A capability-family observer: records its hooks and what they see."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        _COMBINED.append("before_model_request")
        return state

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        assert state.response is not None
        # usage is merged before after_model_request sees the state
        merged = state.usage.output_tokens
        _COMBINED.append(f"after_model_request (usage {merged})")
        return state

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        # the turn was committed: after_model's write is in the run state tools see
        _COMBINED.append(f"before_tool_execute (committed {ctx.state.get('last_after')})")
        return call

    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> None:
        _COMBINED.append(f"after_tool_execute ({result.status})")


async def test_middleware_and_capability_follow_the_documented_turn_order(client: Client) -> None:
    _COMBINED.clear()
    step = [0]

    def before(state: dict[str, Any]) -> None:
        step[0] += 1
        _COMBINED.append(f"before_model (turn {step[0]})")

    async def wrap(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        _COMBINED.append("wrap_model_call >")
        response = await next(request)
        _COMBINED.append("wrap_model_call <")
        return response

    def after(state: dict[str, Any]) -> dict[str, Any]:
        _COMBINED.append("after_model")
        return {"last_after": step[0]}

    def answer(i: int, messages: list[Message], info: ModelInfo) -> ModelResponse:
        _COMBINED.append("model activity")
        if i == 0:
            return calls(("probe", {"x": 1}))
        return text("finished")

    mw = Middleware("mw", before_model=before, wrap_model_call=wrap, after_model=after,
                    state_schema={"last_after": 0})
    agent = Agent(name="mw-order-combined", model=Recorder("mw-order-combined-model", answer)
                  .model(), tools=[probe], capabilities=[Observer, mw])
    result, events = await run_agent(client, agent)

    assert result.output == "finished"
    one_turn = [
        "wrap_model_call >", "model activity", "wrap_model_call <",
        "after_model_request (usage {usage})", "after_model",
    ]
    turn1 = [s.replace("{usage}", "5") for s in one_turn]
    turn2 = [s.replace("{usage}", "10") for s in one_turn]
    assert _COMBINED == [
        "before_model (turn 1)", "before_model_request", *turn1,
        "before_tool_execute (committed 1)", "tool activity", "after_tool_execute (succeeded)",
        "before_model (turn 2)", "before_model_request", *turn2,
    ]
    assert activity_types(events) == [
        "towline.model_request", "towline.tool.probe", "towline.model_request",
    ]
    assert [r.status for r in tool_returns(result.messages)] == ["succeeded"]


def test_middleware_names_must_be_unique_within_an_agent() -> None:
    with pytest.raises(ConfigurationError, match="'dup'"):
        Agent(name="mw-dup", capabilities=[Middleware("dup"), Middleware("dup")])
    # distinct names are fine
    Agent(name="mw-dup-ok", capabilities=[Middleware("dup"), Middleware("other")])


_SUB: list[str] = []


@tool
def cap_lookup(key: str) -> str:
    """A tool a capability contributes."""
    _SUB.append(f"tool {key}")
    return f"value of {key}"


class Gate(Capability):
    """A Capability subclass using the middleware family of hooks and contributions."""

    tools = (cap_lookup,)
    state_schema = MappingProxyType(
        {"gate_seen": 0, "gate_log": ([], lambda old, new: [*old, *new])}
    )

    def before_model(self, state: dict[str, Any]) -> dict[str, Any]:
        _SUB.append("before_model")
        return {"gate_seen": state["gate_seen"] + 1, "gate_log": ["in"]}

    async def wrap_model_call(self, request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        _SUB.append(f"wrap sees gate_seen={request.state['gate_seen']}")
        return await next(request)

    def after_model(self, state: dict[str, Any]) -> dict[str, Any] | None:
        _SUB.append("after_model")
        if state["gate_seen"] == 1:
            return {"jump_to": "model"}  # bounce the first answer for another pass
        return None


async def test_capability_subclass_behaves_like_a_middleware(client: Client) -> None:
    _SUB.clear()

    def answer(i: int, messages: list[Message], info: ModelInfo) -> ModelResponse:
        _SUB.append(f"model offered {[t.name for t in info.tools]}")
        return calls(("cap_lookup", {"key": "k"})) if i == 1 else text(f"answer {i}")

    agent = Agent(name="mw-cap-sub", model=Recorder("mw-cap-sub-model", answer).model(),
                  capabilities=[Gate()])
    result, events = await run_agent(client, agent)

    assert result.output == "answer 2"
    assert _SUB == [
        "before_model", "wrap sees gate_seen=1", "model offered ['cap_lookup']", "after_model",
        "before_model", "wrap sees gate_seen=2", "model offered ['cap_lookup']", "after_model",
        "tool k",
        "before_model", "wrap sees gate_seen=3", "model offered ['cap_lookup']", "after_model",
    ]
    # the reducer ran once per turn; jump_to never reached the state
    assert result.state == {"gate_seen": 3, "gate_log": ["in", "in", "in"]}
    assert "towline.tool.cap_lookup" in activity_types(events)
    assert [r.content for r in tool_returns(result.messages)] == ["value of k"]
