"""History agents whose runs record what people and subscribers do: approvals decided and
timed out, a session's next message and its idle timeout, and a subscriber following a
streaming run (with the interactions `scripts/record_history.py` performs).

Like every history agent (see `tests/history_agents.py`), these definitions never change: a
committed history names its agent, and replaying it runs today's engine for that agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle

from towline import Agent, ModelSettings, tool
from towline.capabilities import ToolApproval
from towline.messages import Message, ModelResponse, ToolCallPart
from towline.models import FunctionModel, ModelInfo
from towline.workflows import ApprovalDecision, SendInput

try:  # imported as `history_people` (tests/ on sys.path) or as `tests.history_people`
    from history_turns import calls, lookup, returns_in
except ModuleNotFoundError:
    from tests.history_turns import calls, lookup, returns_in

__all__ = [
    "transfer", "approval_agent", "approve_one_reject_one_then_chat", "streaming_agent",
    "follow_to_the_end", "timeouts_agent",
]


@tool
def transfer(amount: int) -> str:
    """Move money (a human approves each transfer)."""
    return f"moved {amount}"


def approval_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Step 1: two transfers; step 2: report the decisions; step 3: answer the follow-up."""
    if info.run_step == 1:
        return calls(("transfer", {"amount": 5}), ("transfer", {"amount": 500}))
    if info.run_step == 2:
        return ", ".join(f"{r.tool_call_id}={r.status}" for r in returns_in(messages)[-2:])
    return "you are welcome"


approval_agent = Agent(
    name="history-approval", model=FunctionModel(approval_script, model_name="history-approval"),
    tools=[transfer], capabilities=[ToolApproval(tools=["transfer"], timeout=timedelta(hours=1))],
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


# --- an approval timeout and a session timeout that fire -------------------------------------------


def timeouts_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """A transfer nobody approves in time, then report its status."""
    done = returns_in(messages)
    if not done:
        return calls(("transfer", {"amount": 7}))
    return f"transfer was {done[0].status}"


timeouts_agent = Agent(
    name="history-timeouts",
    model=FunctionModel(timeouts_script, model_name="history-timeouts-model"),
    tools=[transfer],
    capabilities=[ToolApproval(tools=["transfer"], timeout=timedelta(seconds=1))],
)
