"""The recordings of the hostile audit (issue 28 item 3): the runs whose commands the audit's
fixes change, for `scripts/record_history.py` and the replay tests.

- `history-audit-calls`: a response asking for 1,001 tool calls fails `UsageLimitExceeded` as
  it arrives, before any call is scheduled (more would pass Temporal's 2,000 pending activities);
- `history-audit-state`: a middleware writing a state value over the payload limit fails
  `PayloadTooLarge` naming the hook and the key, the state not committed;
- `history-audit-report`: a tool reporting a cost the ledger cannot record (`1e300`) fails the
  run `UsageLimitExceeded` naming the tool and the field, after its one execution.
"""

from __future__ import annotations

from typing import Any

from towline import Agent, Middleware, tool
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, Usage, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput
from towline.tools import ToolResult

__all__ = ["AUDIT_AGENTS", "recordings"]


def _prompt(messages: list[Message]) -> str:
    first = messages[0] if messages else None
    if isinstance(first, ModelRequest):
        for p in first.parts:
            if isinstance(p, UserPart) and isinstance(p.content, str):
                return p.content
    return ""


@tool(idempotent=True)
def ping(i: int) -> int:
    """Answers its argument."""
    return i


@tool(idempotent=True)
def priced() -> ToolResult:
    """Reports a cost no ledger records."""
    return ToolResult(content="done", usage=Usage(cost=1e300))


def _script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if any(isinstance(m, ModelResponse) for m in messages):
        return "done"
    prompt = _prompt(messages)
    if prompt == "calls":
        return ModelResponse(parts=[ToolCallPart(tool_name="ping", args={"i": i},
                                                 tool_call_id=f"p{i}") for i in range(1001)])
    if prompt == "report":
        return ModelResponse(parts=[ToolCallPart(tool_name="priced", tool_call_id="r1")])
    return "done"


def _big(state: dict[str, Any]) -> dict[str, Any] | None:
    return {"blob": "y" * (2 * 1024 * 1024)} if _prompt(state["messages"]) == "state" else None


audit_agent = Agent(
    name="history-audit", model=FunctionModel(_script, model_name="history-audit-model"),
    tools=[ping, priced],
    capabilities=[Middleware("bigstate", after_model=_big, state_schema={"blob": None})])

AUDIT_AGENTS = [audit_agent]


def recordings(recording: Any, memo: dict[str, Any]) -> list[Any]:
    """The recordings, as `Recording`s (the class is `tests/history_agents.py`'s), started as
    `start_run` starts them (`memo`: its start memo)."""
    return [recording(f"history-audit-{prompt}", RunInput(agent=audit_agent.name, prompt=prompt),
                      start_attributes=True, memo=memo) for prompt in ("calls", "state", "report")]
