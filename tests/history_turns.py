"""History agents whose runs record one agent's own turns: parallel tools with a retry, a
capability's and a middleware's hooks, structured output, a failed run, continue-as-new, a
payload store, and frontier content (thinking, images, native output).

Like every history agent (see `tests/history_agents.py`), these definitions never change: a
committed history names its agent, and replaying it runs today's engine for that agent.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from towline import (
    Agent,
    Capability,
    Limits,
    Middleware,
    ModelRequestState,
    ModelSettings,
    ToolCall,
    ToolContext,
    ToolReturn,
    tool,
)
from towline.errors import ModelRetry
from towline.messages import (
    BinaryContent,
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
    media_in,
)
from towline.models import FunctionModel, ModelInfo

__all__ = [
    "recorded_in_history_agents", "returns_in", "calls", "lookup", "flaky", "tools_script", "tools_agent", "capability_agent",
    "middleware_agent", "structured_agent", "failing_agent", "ticking_agent", "storing_agent",
    "PNG", "frontier_agent",
]


RECORDED_IN = "history_agents"
"""The module the history agents were defined in when their histories were recorded."""


def recorded_in_history_agents(*named: Any) -> None:
    """Give classes and functions an agent's definition names the module they were recorded in.

    An agent's version fingerprints the qualified names (module and name) of its output type,
    its capabilities' classes and the functions they hold, and a recorded run refuses a worker
    whose agent has another version. These lived in `history_agents` when their runs were
    recorded; moved here, they keep that name so the committed histories still replay.
    """
    for obj in named:
        obj.__module__ = RECORDED_IN


def returns_in(messages: list[Message]) -> list[ToolReturnPart]:
    """The tool returns in `messages`, oldest first."""
    return [
        p for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def calls(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    """A response that calls each `(tool name, arguments)`."""
    return ModelResponse(parts=[ToolCallPart(tool_name=n, args=a) for n, a in calls])


# --- tools, with a retry ------------------------------------------------------------------


@tool
def lookup(city: str) -> str:
    """The weather in `city`."""
    return f"sunny in {city}"


@tool(max_retries=2)
def flaky(ctx: ToolContext, n: int) -> int:
    """Doubles `n`, but asks for a retry on its first consecutive call."""
    if ctx.retry == 0:
        raise ModelRetry("try again with the same number")
    return 2 * n


def tools_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Two parallel calls (one asks for a retry), the retried call, then the answer."""
    done = returns_in(messages)
    if not done:
        return calls(("lookup", {"city": "Paris"}), ("flaky", {"n": 3}))
    if len(done) == 2:
        return calls(("flaky", {"n": 3}))
    return "; ".join(f"{r.tool_name}={r.content}" for r in done if r.status == "succeeded")


tools_agent = Agent(
    name="history-tools", model=FunctionModel(tools_script, model_name="history-tools-model"),
    instructions="Use the tools.", tools=[lookup, flaky],
)


# --- a capability with before/after hooks ----------------------------------------------


@tool
def shout(text: str) -> str:
    """Echo `text`."""
    return text


@dataclass(frozen=True)
class Polish(Capability):
    """Windows what is sent, sets the temperature, and edits tool arguments and answers."""

    window: int = 3

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return state.model_copy(update={
            "request_messages": state.messages[-self.window:],
            "settings": state.settings.model_copy(update={"temperature": 0.5}),
        })

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        response = state.response
        assert response is not None
        if response.text:
            parts = [p.model_copy(update={"content": p.content + "!"}) if p.part_kind == "text"
                     else p for p in response.parts]
            return state.model_copy(update={"response": response.model_copy(update={"parts": parts})})
        return state

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        return call.model_copy(update={"args": {"text": str(call.args["text"]).upper()}})

    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> None:
        return None


def capability_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    done = returns_in(messages)
    if not done:
        return calls(("shout", {"text": "hello"}))
    return f"said {done[0].content}"


recorded_in_history_agents(Polish)
capability_agent = Agent(
    name="history-capability",
    model=FunctionModel(capability_script, model_name="history-capability-model"),
    tools=[shout], capabilities=[Polish()],
)


# --- a middleware with state and a jump ------------------------------------------------------


def _append(old: list[str] | None, new: list[str]) -> list[str]:
    return [*(old or []), *new]


def count_pass(state: dict[str, Any]) -> dict[str, Any]:
    return {"passes": state["passes"] + 1, "log": [f"pass {state['passes'] + 1}"]}


def gate(state: dict[str, Any]) -> dict[str, Any] | None:
    """Bounce a draft answer back to the model once."""
    last = state["messages"][-1]
    if isinstance(last, ModelResponse) and last.text.startswith("draft"):
        return {"jump_to": "model", "log": ["bounced"]}
    return None


def middleware_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    drafts = sum(1 for m in messages if isinstance(m, ModelResponse) and m.text.startswith("draft"))
    return "draft answer" if drafts == 0 else "final answer"


recorded_in_history_agents(_append, count_pass, gate)
middleware_agent = Agent(
    name="history-middleware",
    model=FunctionModel(middleware_script, model_name="history-middleware-model"),
    capabilities=[Middleware(
        "gate", before_model=count_pass, after_model=gate,
        state_schema={"passes": 0, "log": ([], _append)},
    )],
)


# --- structured output, with one invalid attempt --------------------------------------------


class Forecast(BaseModel):
    """The final forecast."""

    city: str
    high: int


def structured_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    out = info.output_tools[0].name
    tried = any(r.tool_name == out for r in returns_in(messages))
    args: dict[str, Any] = {"city": "Oslo", "high": 4} if tried else {"city": "Oslo"}
    return ModelResponse(parts=[ToolCallPart(tool_name=out, args=args, kind="output")])


recorded_in_history_agents(Forecast)
structured_agent = Agent(
    name="history-structured",
    model=FunctionModel(structured_script, model_name="history-structured-model"),
    output_type=Forecast,
)


# --- a failed run -------------------------------------------------------------------------------


@tool(max_retries=1)
def stubborn(n: int) -> int:
    """Always asks for another try."""
    raise ModelRetry(f"{n} is not accepted")


def failing_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    return calls(("stubborn", {"n": info.run_step}))


failing_agent = Agent(
    name="history-failed",
    model=FunctionModel(failing_script, model_name="history-failed-model"),
    tools=[stubborn], limits=Limits(max_steps=10),
)


# --- continue-as-new ------------------------------------------------------------------------------


@tool
def tick(n: int) -> int:
    """Returns `n`."""
    return n


def ticking_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step <= 4:
        return calls(("tick", {"n": info.run_step}))
    return f"ticked {len(returns_in(messages))} times"


ticking_agent = Agent(
    name="history-continue-as-new",
    model=FunctionModel(ticking_script, model_name="history-ticking-model"),
    tools=[tick], settings=ModelSettings(max_tokens=100),
    model_timeout=timedelta(seconds=30),
)


# --- a payload store (issue 10) --------------------------------------------------------------------


@tool
def bulky(n: int) -> str:
    """Returns a 3 kB record (over the recording store's 2 KiB threshold: stored)."""
    return f"record {n}: " + "0123456789" * 300


def bulky_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step <= 2:
        return calls(("bulky", {"n": info.run_step}))
    return f"read {len(returns_in(messages))} records"


storing_agent = Agent(
    name="history-stored",
    model=FunctionModel(bulky_script, model_name="history-bulky-model"),
    tools=[bulky],
)
"""Recorded with a file payload store (`tests/histories/payloads/`, 2 KiB threshold): its
tool results, continue-as-new inputs and result are stored, the history holds references."""


# --- frontier models: thinking, an image in the prompt and from a tool, native output ------------

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhg"
                       "GAWjR9awAAAABJRU5ErkJggg==")
"""A 1x1 PNG."""


class Sighting(BaseModel):
    """What the pictures show."""

    subject: str
    images: int
    note: str = ""


@tool
def snapshot() -> list[Any]:
    """A second picture, as bytes, with a caption."""
    return ["the snapshot", BinaryContent(data=PNG, media_type="image/png")]


def frontier_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Think and take a snapshot, then think and answer JSON counting the images seen."""
    if not returns_in(messages):
        return ModelResponse(parts=[
            ThinkingPart(content="One image; a snapshot would help.", signature="sig-frontier-1",
                         provider="anthropic"),
            ToolCallPart(tool_name="snapshot", args={}),
        ])
    images = sum(
        len(media_in(p.content)[1]) for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, UserPart | ToolReturnPart)
    )
    answer = {"subject": "a dot", "images": images, "note": None}  # native: null = not given
    return ModelResponse(parts=[
        ThinkingPart(content="Both show one dot.", signature="sig-frontier-2", provider="anthropic"),
        TextPart(content=json.dumps(answer)),
    ])


recorded_in_history_agents(Sighting)
frontier_agent = Agent(
    name="history-frontier",
    model=FunctionModel(frontier_script, model_name="history-frontier-model"),
    tools=[snapshot], output_type=Sighting, output_mode="native",
)
