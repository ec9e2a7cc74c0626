"""Agents for `tests/test_rerun.py` and `tests/test_eval.py`.

- `brief_tools_agent` and `no_flaky_tools_agent`: today's versions of the committed
  `history-tools` agent (`tests/history_agents.py`, same name), each with one capability
  added: one changes what the first request sends, one refuses a tool call the recording made.
- `echo_agent` / `echo_agent_v2`: a run recorded live in a test, and today's change of it.
- `eval_agent`: what `towline eval` runs, served by a separate worker process
  (`tests/worker_main.py --agents rerun_agents:EVAL_AGENTS`) that a test SIGKILLs mid-eval.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from history_agents import tools_agent

from towline import Agent, Capability, ModelRequestState, ToolCall, ToolContext, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["brief_tools_agent", "no_flaky_tools_agent", "echo_agent", "echo_agent_v2",
           "eval_agent", "EVAL_AGENTS", "LIVE_CALLS", "one_word_shorter"]


@dataclass(frozen=True)
class BeBrief(Capability):
    """Sends one more system message with every request."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        extra = ModelRequest(parts=[SystemPart(content="Be brief.")])
        return state.model_copy(update={"request_messages": [*state.request_messages, extra]})


@dataclass(frozen=True)
class NoFlaky(Capability):
    """Refuses every call of the `flaky` tool (recorded `not_executed`)."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        if call.tool_name == "flaky":
            raise PermissionError("flaky is not allowed any more")
        return call


brief_tools_agent = replace(tools_agent, capabilities=[BeBrief()])
no_flaky_tools_agent = replace(tools_agent, capabilities=[NoFlaky()])

LIVE_CALLS: list[str] = []
"""Every call the live `echo` tool received in this process."""


@tool
def echo(text: str) -> str:
    """Echo `text`, upper-cased."""
    LIVE_CALLS.append(text)
    return text.upper()


def _prompt(messages: list[Message]) -> str:
    return next((str(p.content) for m in messages if isinstance(m, ModelRequest)
                 for p in m.parts if isinstance(p, UserPart)), "")


def echo_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Echo the prompt with the tool, then answer with its result."""
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart(tool_name="echo", args={"text": _prompt(messages)})])
    return f"echoed: {returns[-1].content}"


echo_agent = Agent(name="rerun-echo", model=FunctionModel(echo_script, model_name="echo-model"),
                   instructions="Echo the prompt.", tools=[echo])
echo_agent_v2 = replace(echo_agent, instructions="Echo the prompt, loudly.")


@tool(idempotent=True, heartbeat_timeout=timedelta(seconds=4))
async def square(n: int) -> int:
    """The square of `n`, slowly (so a worker can be killed while cases are under way); a
    call on a killed worker is retried elsewhere within the 4 s heartbeat timeout."""
    await asyncio.sleep(0.2)
    return n * n


def square_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """`square N?` -> the tool, then `N squared is M`."""
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, ToolReturnPart)]
    n = int(re.findall(r"-?\d+", _prompt(messages))[0])
    if not returns:
        return ModelResponse(parts=[ToolCallPart(tool_name="square", args={"n": n})])
    return f"{n} squared is {returns[-1].content}"


eval_agent = Agent(name="rerun-eval", model=FunctionModel(square_script, model_name="square-model"),
                   tools=[square], model_heartbeat_timeout=timedelta(seconds=4))
EVAL_AGENTS = [eval_agent]


def one_word_shorter(ctx: Any) -> bool:
    """A `Python` evaluator of the eval tests: the answer has fewer than five words."""
    return len(str(ctx.output).split()) < 5
