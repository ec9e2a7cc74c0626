"""An agent for the `towline mcp-serve` cancel test: its run waits for an approval that never comes."""

from __future__ import annotations

from towline import Agent, ModelResponse, ToolCallPart, tool
from towline.capabilities import ToolApproval
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo

__all__ = ["waiting_agent"]


@tool
def launch(target: str) -> str:
    """Launch something (a human approves every launch)."""
    return f"launched {target}"


def _ask(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="launch", args={"target": "moon"})])
    return "launched"


waiting_agent = Agent(
    name="mcp-serve-waiting", model=FunctionModel(_ask, model_name="mcp-serve-waiting"),
    tools=[launch], capabilities=[ToolApproval(tools=["launch"])],
)
"""Calls `launch`, which waits for an approval (until the run is cancelled)."""
