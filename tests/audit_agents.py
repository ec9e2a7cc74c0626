"""A hostile agent for tests/test_audit_user_code.py: its hooks, reducer and tools raise what
the prompt names (`SystemExit`, `KeyboardInterrupt`, `GeneratorExit`, a bare `BaseException`,
`asyncio.CancelledError`), the way a careless hook author's code does (argparse's `--limit lots`
raises `SystemExit(2)`).

The prompt is `"<site> <kind>"`: `site` is where it raises (`before_model_request`,
`after_model`, `before_tool_execute`, `reducer`, `sync_tool`, `async_tool`, `idempotent_tool`,
`workflow_tool`) and `kind` what (a key of `RAISES`); `"ok -"` raises nothing. Served by
`towline worker --agent audit_agents:agent` (with `tests/` on PYTHONPATH), so a worker that dies
or wedges is seen as a process.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from towline import Agent, Capability, Middleware, ModelRequestState, ToolCall, ToolContext, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["RAISES", "SITES", "agent", "hostile", "HOSTILE"]


def _argparse_exit() -> BaseException:
    """What argparse raises for `/search --limit lots`: `SystemExit(2)` (it prints usage too)."""
    parser = argparse.ArgumentParser(prog="/search", exit_on_error=True)
    parser.add_argument("--limit", type=int)
    try:
        parser.parse_args(["--limit", "lots"])
    except SystemExit as e:
        return e
    raise AssertionError("argparse accepted --limit lots")


RAISES: dict[str, Callable[[], BaseException]] = {
    "SystemExit": _argparse_exit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "BaseException": lambda: BaseException("a bare BaseException"),
    "CancelledError": asyncio.CancelledError,
}

SITES = ("before_model_request", "after_model", "before_tool_execute", "reducer", "sync_tool",
         "async_tool", "idempotent_tool", "workflow_tool")


def _order(messages: list[Message]) -> tuple[str, str]:
    """(site, kind) from the run's prompt."""
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, UserPart) and isinstance(p.content, str):
                    site, _, kind = p.content.partition(" ")
                    return site, kind
    return "ok", "-"


def _raise_if(here: str, messages: list[Message]) -> None:
    site, kind = _order(messages)
    if site == here:
        raise RAISES[kind]()


class Raising(Capability):
    """Raises from `before_model_request` or `before_tool_execute` when the prompt says so."""

    def __init__(self) -> None:
        self.state_schema = {"seen": (0, lambda old, new: _reduce(old, new))}

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        _raise_if("before_model_request", state.messages)
        return state

    async def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        await asyncio.sleep(0)
        if call.tool_name == "noop":
            site, kind = call.args.get("site", ""), call.args.get("kind", "")
            if site == "before_tool_execute":
                raise RAISES[kind]()
        return call


def _reduce(old: Any, new: Any) -> Any:
    if isinstance(new, dict) and new.get("raise"):  # pyright: ignore[reportUnknownMemberType]
        raise RAISES[str(new["raise"])]()  # pyright: ignore[reportUnknownArgumentType]
    return new


async def _after_model(state: dict[str, Any]) -> dict[str, Any] | None:
    site, kind = _order(state["messages"])
    if site == "after_model":
        raise RAISES[kind]()
    if site == "reducer":
        return {"seen": {"raise": kind}}
    return None


@tool
def sync_tool(kind: str) -> str:
    """A non-idempotent sync tool (run in a thread) that raises `kind`."""
    raise RAISES[kind]()


@tool
async def async_tool(kind: str) -> str:
    """A non-idempotent async tool that raises `kind`."""
    await asyncio.sleep(0)
    raise RAISES[kind]()


@tool(idempotent=True)
def idempotent_tool(kind: str) -> str:
    """An idempotent sync tool that raises `kind`."""
    raise RAISES[kind]()


@tool(in_workflow=True)
async def workflow_tool(kind: str) -> str:
    """A tool run in the workflow (deterministic code) that raises `kind`."""
    raise RAISES[kind]()


@tool(idempotent=True)
def noop(site: str, kind: str) -> str:
    """Does nothing (its `before_tool_execute` hook is what raises)."""
    return "nothing"


TOOLS = {"sync_tool", "async_tool", "idempotent_tool", "workflow_tool", "before_tool_execute"}


def _answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return "done"
    site, kind = _order(messages)
    if site in TOOLS:
        name = "noop" if site == "before_tool_execute" else site
        args = {"site": site, "kind": kind} if name == "noop" else {"kind": kind}
        return ModelResponse(parts=[TextPart(content="calling"), ToolCallPart(
            tool_name=name, args=args, tool_call_id="c1")], finish_reason="tool_calls")
    return "done"


agent = Agent(
    name="audit-raising", model=FunctionModel(_answer, model_name="audit-raising"),
    tools=[sync_tool, async_tool, idempotent_tool, workflow_tool, noop],
    capabilities=[Raising(), Middleware("after", after_model=_after_model)],
)


HOSTILE = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b]0;pwned\x07\u202eevil\x9b"
"""Terminal control a model or a tool can put in its text: an OSC 52 clipboard write, a
screen clear, a title change, a bidirectional override, a C1 CSI."""


@tool(idempotent=True)
def shout() -> str:
    """Returns text full of terminal control sequences."""
    return f"tool says {HOSTILE}"


def _hostile(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[TextPart(content=f"thinking {HOSTILE}"), ToolCallPart(
            tool_name="shout", args={}, tool_call_id="s1")], finish_reason="tool_calls")
    return f"model says {HOSTILE}\nsecond line"


hostile = Agent(name="audit-hostile-text", model=FunctionModel(_hostile, model_name="audit-hostile"),
                tools=[shout])
