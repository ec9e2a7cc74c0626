"""The agents whose recorded histories live in `tests/histories/` — keep them stable forever.

A committed history names its agent, and replaying it runs today's `AgentRun`
code for that agent against yesterday's events. So these definitions (names,
tools, capabilities, limits, output types) must never change: a change here
would make the replay test compare the engine with a different agent. To
cover new behaviour, add a new agent (and record its history with
`python scripts/record_history.py`); never edit one below.

The model scripts only matter when recording (replay never calls a model);
they are deterministic so that re-recording gives the same conversations.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

try:  # imported as `history_agents` (tests/ on sys.path) or as `tests.history_agents`
    from history_engine3 import approve_each_reused_id, unmarked_agent
except ModuleNotFoundError:
    from tests.history_engine3 import approve_each_reused_id, unmarked_agent
from pydantic import BaseModel
from temporalio.client import WorkflowHandle

from towline import (
    Agent,
    Capability,
    Limits,
    MCPServer,
    Middleware,
    ModelRequestState,
    ModelSettings,
    ToolCall,
    ToolContext,
    ToolReturn,
    tool,
)
from towline.capabilities import (
    CompletionGate,
    ModelFallback,
    Subagent,
    Summarization,
    TodoList,
    ToolApproval,
    ToolSelector,
)
from towline.capabilities.state import ModelCallRequest
from towline.errors import ModelRetry
from towline.messages import (
    BinaryContent,
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
    media_in,
)
from towline.models import FunctionModel, Model, ModelHTTPError, ModelInfo
from towline.results import RunInput
from towline.workflows import ApprovalDecision, SendInput

__all__ = ["HISTORY_AGENTS", "HISTORY_MODELS", "RECORDINGS", "Recording"]


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def _calls(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
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
    done = _returns(messages)
    if not done:
        return _calls(("lookup", {"city": "Paris"}), ("flaky", {"n": 3}))
    if len(done) == 2:
        return _calls(("flaky", {"n": 3}))
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
    done = _returns(messages)
    if not done:
        return _calls(("shout", {"text": "hello"}))
    return f"said {done[0].content}"


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
    tried = any(r.tool_name == out for r in _returns(messages))
    args: dict[str, Any] = {"city": "Oslo", "high": 4} if tried else {"city": "Oslo"}
    return ModelResponse(parts=[ToolCallPart(tool_name=out, args=args, kind="output")])


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
    return _calls(("stubborn", {"n": info.run_step}))


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
        return _calls(("tick", {"n": info.run_step}))
    return f"ticked {len(_returns(messages))} times"


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
        return _calls(("bulky", {"n": info.run_step}))
    return f"read {len(_returns(messages))} records"


storing_agent = Agent(
    name="history-stored",
    model=FunctionModel(bulky_script, model_name="history-bulky-model"),
    tools=[bulky],
)
"""Recorded with a file payload store (`tests/histories/payloads/`, 2 KiB threshold): its
tool results, continue-as-new inputs and result are stored, the history holds references."""


@tool
def transfer(amount: int) -> str:
    """Move money (a human approves each transfer)."""
    return f"moved {amount}"


def approval_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Step 1: two transfers; step 2: report the decisions; step 3: answer the follow-up."""
    if info.run_step == 1:
        return _calls(("transfer", {"amount": 5}), ("transfer", {"amount": 500}))
    if info.run_step == 2:
        return ", ".join(f"{r.tool_call_id}={r.status}" for r in _returns(messages)[-2:])
    return "you are welcome"


approval_agent = Agent(
    name="history-approval", model=FunctionModel(approval_script, model_name="history-approval"),
    tools=[transfer], capabilities=[ToolApproval(tools=["transfer"], timeout=timedelta(hours=1))],
)


# --- tools from an MCP server, listed before every turn ------------------------------------------


def mcp_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Two MCP calls, then one the server reports as an error (isError), then the answer."""
    if info.run_step == 1:
        return _calls(("hist_add", {"a": 2, "b": 3}), ("hist_echo", {"text": "hi"}))
    if info.run_step == 2:
        return _calls(("hist_fail", {"message": "no"}))
    return "; ".join(f"{r.tool_name}={r.status}" for r in _returns(messages))


mcp_agent = Agent(
    name="history-mcp", model=FunctionModel(mcp_script, model_name="history-mcp"),
    mcp_servers=[MCPServer(
        name="hist", command=sys.executable,
        args=[str(Path(__file__).with_name("mcp_servers.py")), "stdio",
              "--dir", "${TMPDIR:-/tmp}/towline-history-mcp"],
        tools=["add", "echo", "fail"],
    )],
    mcp_list_tools="per_turn",
)


async def _eventually(probe: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(400):
        if await probe():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the recorded run never reached the expected state")


async def approve_one_reject_one_then_chat(handle: WorkflowHandle[Any, Any]) -> None:
    """Approve the first transfer, reject the second, send one more message, end the session."""

    async def pending() -> dict[str, Any]:
        state: dict[str, Any] = await handle.query("state")
        return state["pending_approvals"]

    async def both_pending() -> bool:
        return len(await pending()) == 2

    await _eventually(both_pending)
    waiting = await pending()
    first, second = sorted(waiting, key=lambda call_id: waiting[call_id]["args"]["amount"])
    await handle.execute_update("approve", ApprovalDecision(call_id=first))
    await handle.execute_update("reject", ApprovalDecision(call_id=second, reason="too much"))

    async def session_waiting() -> bool:
        state: dict[str, Any] = await handle.query("state")
        return state["status"] == "waiting" and not state["pending_approvals"]

    await _eventually(session_waiting)
    await handle.execute_update("send", SendInput(content="thanks"))
    await handle.signal("end")


# --- streaming: text batches from the model activity (signals), a subscriber's polls (updates) --


async def streaming_script(messages: list[Message], info: ModelInfo) -> AsyncIterator[str | ToolCallPart]:
    """Writes a few words slowly (several text batches), calls `lookup` once, then answers."""
    words = ["Looking", " up", " the", " weather", " now."] if info.run_step == 1 else [
        "It", " is", " sunny", " in", " Paris", " today."]
    for word in words:
        await asyncio.sleep(0.15)
        yield word
    if info.run_step == 1:
        yield ToolCallPart(tool_name="lookup", args={"city": "Paris"}, tool_call_id="call_w")


streaming_agent = Agent(
    name="history-streaming", model=FunctionModel(streaming_script, model_name="history-streaming"),
    tools=[lookup], settings=ModelSettings(stream=True),
)


async def follow_to_the_end(handle: WorkflowHandle[Any, Any]) -> None:
    """Subscribe to the run's events from the start until its last one (polls in history)."""
    from towline.client import events

    async for _ in events(handle):
        pass
# --- a sub-agent: the parent delegates to a child AgentRun workflow ---------------------------


def child_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The child looks the city up, then answers with what it found."""
    done = _returns(messages)
    if not done:
        return _calls(("lookup", {"city": "Lyon"}))
    return f"the child found: {done[0].content}"


subagent_child = Agent(
    name="history-subagent-child",
    model=FunctionModel(child_script, model_name="history-subagent-child-model"),
    tools=[lookup],
)


def parent_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The parent delegates once, then answers with the child's output."""
    done = _returns(messages)
    if not done:
        return _calls(("task", {"prompt": "What is the weather in Lyon?"}))
    return f"delegated: {done[0].content}"


subagent_agent = Agent(
    name="history-subagent",
    model=FunctionModel(parent_script, model_name="history-subagent-model"),
    tools=[lookup], capabilities=[Subagent(subagent_child)],
)


# --- an in_workflow tool: TodoList's write_todos ------------------------------------------------


def todo_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Plan two items, complete them, then answer."""
    done = _returns(messages)
    if not done:
        return _calls(("write_todos", {"todos": [{"content": "look", "status": "in_progress"},
                                                 {"content": "answer"}]}))
    if len(done) == 1:
        return _calls(("write_todos", {"todos": [{"content": "look", "status": "completed"},
                                                 {"content": "answer", "status": "completed"}]}))
    return "all done"


todo_agent = Agent(
    name="history-todo", model=FunctionModel(todo_script, model_name="history-todo-model"),
    capabilities=[TodoList()],
)


# --- model calls made by hooks: Summarization, ToolSelector, CompletionGate ---------------------


@tool
def alpha(n: int) -> int:
    """Returns n + 1."""
    return n + 1


@tool
def beta(n: int) -> int:
    """Returns n + 2."""
    return n + 2


@tool
def gamma(n: int) -> int:
    """Returns n + 3."""
    return n + 3


def hook_models_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Two tool steps, a draft the gate bounces, then the final answer."""
    if info.run_step <= 2:
        return _calls(("alpha", {"n": info.run_step}))
    bounced = any(isinstance(m, ModelRequest) and any(
        isinstance(p, UserPart) and p.text.startswith("Your answer did not pass")
        for p in m.parts) for m in messages)
    return "final: alpha twice" if bounced else "draft"


def summarizer_script(messages: list[Message], info: ModelInfo) -> str:
    return "the user asked for alpha; alpha was called"


def selector_script(messages: list[Message], info: ModelInfo) -> str:
    return '["alpha"]'


def reviewer_script(messages: list[Message], info: ModelInfo) -> str:
    text = " ".join(p.text for m in messages if isinstance(m, ModelRequest)
                    for p in m.parts if isinstance(p, UserPart))
    return "PASS" if "final:" in text else "FAIL: say what was done"


hook_models_agent = Agent(
    name="history-hook-models",
    model=FunctionModel(hook_models_script, model_name="history-hook-models-model"),
    tools=[alpha, beta, gamma],
    capabilities=[
        Summarization(model="history-summarizer", trigger_messages=3, keep=2),
        ToolSelector(model="history-selector", max_tools=1),
        CompletionGate(rubric_model="history-reviewer", rubric="Say what was done."),
    ],
)


# --- a wrap_model_call chain around ModelFallback ------------------------------------------------


def refusing_script(messages: list[Message], info: ModelInfo) -> str:
    raise ModelHTTPError(400, "the primary model refuses")


def backup_script(messages: list[Message], info: ModelInfo) -> str:
    return f"backup answered {len(info.tools)} tools"


async def shape(request: ModelCallRequest, next: Any) -> ModelResponse:
    """Outermost wrapper: a system note on the way in, the model name on the way out."""
    note = ModelRequest(id="shape-note", parts=[SystemPart(content="Be brief.")])
    response: ModelResponse = await next(request.model_copy(
        update={"messages": [note, *request.messages]}))
    parts = [p.model_copy(update={"content": f"{p.content} (via {response.model_name})"})
             if p.part_kind == "text" else p for p in response.parts]
    return response.model_copy(update={"parts": parts})


wrap_agent = Agent(
    name="history-wrap",
    model=FunctionModel(refusing_script, model_name="history-wrap-primary"),
    tools=[lookup],
    capabilities=[Middleware("shape", wrap_model_call=shape), ModelFallback("history-backup")],
)


# --- an approval timeout and a session timeout that fire -------------------------------------------


def timeouts_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """A transfer nobody approves in time, then report its status."""
    done = _returns(messages)
    if not done:
        return _calls(("transfer", {"amount": 7}))
    return f"transfer was {done[0].status}"


timeouts_agent = Agent(
    name="history-timeouts",
    model=FunctionModel(timeouts_script, model_name="history-timeouts-model"),
    tools=[transfer],
    capabilities=[ToolApproval(tools=["transfer"], timeout=timedelta(seconds=1))],
)


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
    if not _returns(messages):
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


frontier_agent = Agent(
    name="history-frontier",
    model=FunctionModel(frontier_script, model_name="history-frontier-model"),
    tools=[snapshot], output_type=Sighting, output_mode="native",
)


HISTORY_MODELS: dict[str, Model] = {
    "history-summarizer": FunctionModel(summarizer_script, model_name="history-summarizer"),
    "history-selector": FunctionModel(selector_script, model_name="history-selector"),
    "history-reviewer": FunctionModel(reviewer_script, model_name="history-reviewer"),
    "history-backup": FunctionModel(backup_script, model_name="history-backup"),
}
"""Models the history agents' hooks call by name (only used when recording)."""


HISTORY_AGENTS = [
    tools_agent, capability_agent, middleware_agent, structured_agent, failing_agent,
    ticking_agent,
    approval_agent,
    mcp_agent,
    streaming_agent,
    subagent_agent, todo_agent, hook_models_agent, wrap_agent, timeouts_agent, unmarked_agent,
    storing_agent,
    frontier_agent,
]
"""Every agent a committed history names."""


@dataclass(frozen=True)
class Recording:
    """One recorded run: its workflow id (the file name), its input, and what a person does."""

    workflow_id: str
    input: RunInput
    interact: Callable[[WorkflowHandle[Any, Any]], Awaitable[None]] | None = None
    stored: bool = False
    """Recorded with the payload store of `tests/histories/payloads/` (replayed with it too)."""
    start_attributes: bool = False
    """Started as `start_run` starts a run: agent, version, status and counters in the request."""
    memo: dict[str, Any] | None = None
    """The start request's memo (a fork's lineage)."""
    routed: bool = False
    """Run by a worker whose model calls matching `ROUTED_PATTERN` go to a model queue."""


RECORDINGS = [
    Recording("history-tools", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording("history-capability", RunInput(agent="history-capability", prompt="say hello")),
    Recording("history-middleware", RunInput(agent="history-middleware", prompt="answer well")),
    Recording("history-structured", RunInput(agent="history-structured", prompt="forecast")),
    Recording("history-failed", RunInput(agent="history-failed", prompt="insist")),
    Recording(
        "history-continue-as-new",
        RunInput(agent="history-continue-as-new", prompt="tick", continue_as_new_after_events=25),
    ),
    Recording(
        "history-approval", RunInput(agent="history-approval", prompt="pay", session=True),
        interact=approve_one_reject_one_then_chat,
    ),
    Recording("history-mcp", RunInput(agent="history-mcp", prompt="use the server")),
    Recording("history-streaming", RunInput(agent="history-streaming", prompt="weather"),
              interact=follow_to_the_end),
    Recording("history-subagent", RunInput(agent="history-subagent", prompt="delegate")),
    Recording("history-todo", RunInput(agent="history-todo", prompt="plan it")),
    Recording("history-hook-models", RunInput(agent="history-hook-models", prompt="use alpha")),
    Recording("history-wrap", RunInput(agent="history-wrap", prompt="answer")),
    # recorded once runs recorded their agent's version (a `towline-agent-version-*` marker)
    Recording("history-versioned", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording(
        "history-timeouts",
        RunInput(agent="history-timeouts", prompt="pay", session=True,
                 session_timeout=timedelta(seconds=2)),
    ),
    # Recorded by the code of issue 10: model requests by key, facts carried across
    # continue-as-new (the `towline-carried-facts` patch), payloads in a store.
    Recording(
        "history-carried",
        RunInput(agent="history-continue-as-new", prompt="tick", continue_as_new_after_events=25),
    ),
    Recording(
        "history-stored",
        RunInput(agent="history-stored", prompt="read", continue_as_new_after_events=20),
        stored=True,
    ),
    # Recorded once a run decides its agent version before the search-attributes local
    # activity (the `towline-version-first` patch); the second names no known agent.
    Recording("history-version-first", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording("history-version-first-unknown", RunInput(agent="no-such-agent", prompt="hello")),
    # Recorded by the code of issue 19: thinking parts, an image in the prompt and one a tool
    # returned, an agent with native structured output.
    Recording(
        "history-frontier",
        RunInput(agent="history-frontier",
                 prompt=["What do these show?", BinaryContent(data=PNG, media_type="image/png")]),
    ),
    # Recorded by the code of issue 21: the engine-version cascade (`towline-engine-2`, one
    # engine marker and the agent version's), search attributes from the start request and
    # upserted sparsely; a session that waits (status changes) and one that names no agent.
    Recording(
        "history-engine",
        RunInput(agent="history-tools", prompt="weather and maths", session=True,
                 session_timeout=timedelta(seconds=2)),
        start_attributes=True,
    ),
    Recording("history-engine-unknown", RunInput(agent="no-such-agent", prompt="hello"),
              start_attributes=True),
    # Recorded by the code of issues 21-23 (`towline-engine-3`, `tests/history_engine3.py`).
    Recording(
        "history-engine3-todo",
        RunInput(agent="history-todo", prompt="plan it", priority=2, tenant="acme",
                 continue_as_new_after_events=12),
        start_attributes=True, routed=True,
    ),
    Recording("history-engine3-fork", RunInput(agent="history-tools", prompt="weather and maths"),
              start_attributes=True,
              memo={"towline.forked_from": {"run_id": "history-tools", "step": 1}}),
    Recording("history-engine3-approval",
              RunInput(agent="history-unmarked", prompt="pay twice", priority=4, tenant="acme"),
              interact=approve_each_reused_id, start_attributes=True),
]
"""What `scripts/record_history.py` runs (every execution of each is written)."""
