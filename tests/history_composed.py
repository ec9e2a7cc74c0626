"""History agents whose runs record work beyond the agent's model and function tools: MCP
tools listed every turn, a sub-agent's child workflow, an in-workflow tool, model calls made by
hooks (with the models they call, `HOOK_MODELS`), and a `wrap_model_call` chain around a
fallback model.

Like every history agent (see `tests/history_agents.py`), these definitions never change: a
committed history names its agent, and replaying it runs today's engine for that agent.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from towline import Agent, MCPServer, Middleware, tool
from towline.capabilities import (
    CompletionGate,
    ModelFallback,
    Subagent,
    Summarization,
    TodoList,
    ToolSelector,
)
from towline.capabilities.state import ModelCallRequest
from towline.messages import Message, ModelRequest, ModelResponse, SystemPart, UserPart
from towline.models import FunctionModel, Model, ModelHTTPError, ModelInfo

try:  # imported as `history_composed` (tests/ on sys.path) or as `tests.history_composed`
    from history_turns import calls, lookup, recorded_in_history_agents, returns_in
except ModuleNotFoundError:
    from tests.history_turns import calls, lookup, recorded_in_history_agents, returns_in

__all__ = [
    "mcp_agent", "subagent_child", "subagent_agent", "todo_agent", "hook_models_agent",
    "wrap_agent", "HOOK_MODELS",
]


# --- tools from an MCP server, listed before every turn ------------------------------------------


def mcp_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Two MCP calls, then one the server reports as an error (isError), then the answer."""
    if info.run_step == 1:
        return calls(("hist_add", {"a": 2, "b": 3}), ("hist_echo", {"text": "hi"}))
    if info.run_step == 2:
        return calls(("hist_fail", {"message": "no"}))
    return "; ".join(f"{r.tool_name}={r.status}" for r in returns_in(messages))


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


# --- a sub-agent: the parent delegates to a child AgentRun workflow ---------------------------


def child_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The child looks the city up, then answers with what it found."""
    done = returns_in(messages)
    if not done:
        return calls(("lookup", {"city": "Lyon"}))
    return f"the child found: {done[0].content}"


subagent_child = Agent(
    name="history-subagent-child",
    model=FunctionModel(child_script, model_name="history-subagent-child-model"),
    tools=[lookup],
)


def parent_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The parent delegates once, then answers with the child's output."""
    done = returns_in(messages)
    if not done:
        return calls(("task", {"prompt": "What is the weather in Lyon?"}))
    return f"delegated: {done[0].content}"


subagent_agent = Agent(
    name="history-subagent",
    model=FunctionModel(parent_script, model_name="history-subagent-model"),
    tools=[lookup], capabilities=[Subagent(subagent_child)],
)


# --- an in_workflow tool: TodoList's write_todos ------------------------------------------------


def todo_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Plan two items, complete them, then answer."""
    done = returns_in(messages)
    if not done:
        return calls(("write_todos", {"todos": [{"content": "look", "status": "in_progress"},
                                                 {"content": "answer"}]}))
    if len(done) == 1:
        return calls(("write_todos", {"todos": [{"content": "look", "status": "completed"},
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
        return calls(("alpha", {"n": info.run_step}))
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


recorded_in_history_agents(shape)
wrap_agent = Agent(
    name="history-wrap",
    model=FunctionModel(refusing_script, model_name="history-wrap-primary"),
    tools=[lookup],
    capabilities=[Middleware("shape", wrap_model_call=shape), ModelFallback("history-backup")],
)


HOOK_MODELS: dict[str, Model] = {
    "history-summarizer": FunctionModel(summarizer_script, model_name="history-summarizer"),
    "history-selector": FunctionModel(selector_script, model_name="history-selector"),
    "history-reviewer": FunctionModel(reviewer_script, model_name="history-reviewer"),
    "history-backup": FunctionModel(backup_script, model_name="history-backup"),
}
"""Models the hooks of these agents call by name (only used when recording)."""
