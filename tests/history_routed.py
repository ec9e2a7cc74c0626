"""Recordings of issues 21-23's features, for `scripts/record_history.py` and
`tests/test_replay.py`.

- a stateful run (the todo list) on a routed model queue with a priority and a tenant: the
  `towline.state` memo beside the counters, the routes in its facts, the priority on every
  activity, the model call on the route's queue, state and routes carried across
  continue-as-new;
- a fork: the lineage memo read at the start and the "forked from" line in its details;
- a tool without an entry mark, and a model that reuses an approved call id: the second call
  waits for its own decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, tool
from towline.capabilities import ToolApproval
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.workflows import ApprovalDecision

__all__ = ["unmarked_agent", "ROUTED_PATTERN", "approve_each_reused_id"]

ROUTED_PATTERN = "history-todo-*"
"""The model names `scripts/record_history.py` routes to its model queue."""


@tool(entry_mark=False)
def note(text: str) -> str:
    """Write a note (not idempotent; no entry mark)."""
    return f"noted {text}"


@tool
def pay(amount: int) -> str:
    """Pay (needs approval)."""
    return f"paid {amount}"


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]


def reuse_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Pay 1 as call `p1`, pay 2 as `p1` again, write a note, then answer."""
    done = _returns(messages)
    if len(done) < 2:
        return ModelResponse(parts=[
            ToolCallPart(tool_name="pay", args={"amount": len(done) + 1}, tool_call_id="p1")])
    if len(done) == 2:
        return ModelResponse(parts=[ToolCallPart(tool_name="note", args={"text": "paid twice"})])
    return "; ".join(f"{r.tool_name}={r.status}" for r in done)


unmarked_agent = Agent(
    name="history-unmarked", model=FunctionModel(reuse_script, model_name="history-unmarked"),
    tools=[note, pay], capabilities=[ToolApproval(tools=["pay"], timeout=timedelta(hours=1))],
)


async def _eventually(probe: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(600):
        if await probe():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the recording never reached the expected state")


async def approve_each_reused_id(handle: WorkflowHandle[Any, Any]) -> None:
    """Approve `p1` at step 1, then the second `p1` (step 2) once it waits on its own."""
    for step in (1, 2):
        async def waiting(step: int = step) -> bool:
            state: dict[str, Any] = await handle.query("state")
            call = state["pending_approvals"].get("p1")
            return call is not None and call["run_step"] == step

        await _eventually(waiting)
        await handle.execute_update("approve", ApprovalDecision(call_id="p1"))
