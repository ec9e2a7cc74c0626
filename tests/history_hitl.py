"""The human-in-the-loop recordings (issues 31, 32 part 3, 30 items 6, 7, 10). Keep these definitions stable forever
once their histories are committed (see `tests/history_agents.py`).

- `history-hitl`: a predicate rule, three calls waiting together (timers with
  summaries, memo `towline.waiting`), one `decide` batch with an edit remembered for the
  session and a response, a reject, a remembered decision answering a later call, and the
  policy changed live (`set_policy`) answering a call that waits; the audit trail in memo
  `towline.decisions`.
- `history-hitl-client`: a client tool's call waiting for its result (`tool_result`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPart, tool
from towline.capabilities import Ask, ToolApproval
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput
from towline.workflows import Decision, Decisions, PolicyUpdate, ToolResultInput

__all__ = ["HITL_AGENTS", "HITL_RECORDINGS"]


@tool
def wire(amount: int, to: str) -> str:
    """Transfer money (the history's tool: it never changes)."""
    return f"sent {amount} to {to}"


@tool
def question(text: str) -> str:
    """Ask the user (a reviewer answers it)."""
    return "unanswered"


def _rule(args: dict[str, Any]) -> str:
    return "ask" if args["amount"] > 10 else "approve"


def _script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Steps from the prompt (JSON lists of [tool, args, id]); then every return."""
    prompt = next(p for m in messages if isinstance(m, ModelRequest) for p in m.parts
                  if isinstance(p, UserPart))
    steps: list[list[list[Any]]] = json.loads(str(prompt.content))
    made = sum(isinstance(m, ModelResponse) for m in messages)
    if made >= len(steps):
        return "; ".join(f"{p.tool_name}={p.status}:{p.content}" for m in messages
                         if isinstance(m, ModelRequest) for p in m.parts
                         if isinstance(p, ToolReturnPart))
    return ModelResponse(parts=[ToolCallPart(tool_name=c[0], args=c[1], tool_call_id=c[2])
                                for c in steps[made]])


hitl_agent = Agent(
    name="history-hitl", model=FunctionModel(_script, model_name="history-hitl"),
    tools=[wire, question],
    capabilities=[ToolApproval(rules={"wire": _rule, "question": Ask(decisions=("respond",))},
                               timeout=timedelta(hours=1))],
)

HITL_PROMPT = json.dumps([
    [["wire", {"amount": 5, "to": "ann"}, "small"],
     ["wire", {"amount": 50, "to": "bob"}, "big"],
     ["wire", {"amount": 70, "to": "eve"}, "odd"],
     ["question", {"text": "which account?"}, "ask"]],
    [["wire", {"amount": 60, "to": "bob"}, "again"]],
    [["wire", {"amount": 90, "to": "zed"}, "late"]],
])


async def _state_when(handle: WorkflowHandle[Any, Any],
                      ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    for _ in range(600):
        state: dict[str, Any] = await handle.query("state")
        if ready(state):
            return state
        await asyncio.sleep(0.05)
    raise AssertionError("the recording never reached the expected state")


def _waiting(*ids: str) -> Callable[[dict[str, Any]], bool]:
    return lambda s: sorted(s["pending_approvals"]) == sorted(ids)


async def decide_edit_respond_remember_and_change_the_policy(handle: WorkflowHandle[Any, Any]) -> None:
    """Step 1: edit `big` (remembered for the session, for bob), respond to `ask`, then reject
    `odd`; step 2 is answered by the remembered edit; step 3 waits until `set_policy` approves."""
    state = await _state_when(handle, _waiting("big", "odd", "ask"))
    digest = {k: v["digest"] for k, v in state["pending_approvals"].items()}
    await handle.execute_update("decide", Decisions(by="recorder", decisions=[
        Decision(kind="edit", call_id="big", digest=digest["big"], args={"amount": 40, "to": "bob"},
                 remember="session", pattern={"to": "bob"}),
        Decision(kind="respond", call_id="ask", digest=digest["ask"], result="savings")]))
    await _state_when(handle, _waiting("odd"))
    await handle.execute_update("decide", Decisions(decisions=[
        Decision(kind="reject", call_id="odd", digest=digest["odd"], reason="unknown payee")]))
    await _state_when(handle, _waiting("late"))
    await handle.execute_update("set_policy", PolicyUpdate(rules={"wire": "approve"},
                                                           by="recorder", reason="recording"))


@tool(executor="client")
def browser_time(zone: str) -> str:
    """The browser's local time (the client runs it)."""
    raise NotImplementedError


client_agent = Agent(
    name="history-hitl-client", model=FunctionModel(_script, model_name="history-hitl-client"),
    tools=[browser_time],
)

CLIENT_PROMPT = json.dumps([[["browser_time", {"zone": "local"}, "clock"]]])


async def send_the_client_result(handle: WorkflowHandle[Any, Any]) -> None:
    """The client tool's call waits (memo `towline.waiting` = tool_result) until its result."""
    state = await _state_when(handle, _waiting("clock"))
    await handle.execute_update("tool_result", ToolResultInput(
        call_id="clock", result="09:30", digest=state["pending_approvals"]["clock"]["digest"]))


HITL_AGENTS = [hitl_agent, client_agent]
"""The agents these recordings name (appended to `HISTORY_AGENTS`)."""

HITL_RECORDINGS: list[tuple[str, RunInput, Callable[[WorkflowHandle[Any, Any]], Awaitable[None]] | None]] = [
    ("history-hitl", RunInput(agent="history-hitl", prompt=HITL_PROMPT),
     decide_edit_respond_remember_and_change_the_policy),
    ("history-hitl-client", RunInput(agent="history-hitl-client", prompt=CLIENT_PROMPT),
     send_the_client_result),
]
"""(workflow id, input, interaction) of each recording (`Recording(*entry)`)."""
