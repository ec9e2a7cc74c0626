"""Agents with a tool the client runs. `agent`: `pick_color` is its own tool, offered to the model
like any other, but its calls wait for the client's result (`towline respond RUN CALL --result
JSON`, the `tool_result` update, or a `towline serve` page). `web_agent`: no tools of its own;
an AG-UI front end offers `pick_color` in its `RunAgentInput.tools` (`towline serve` makes
them the run's client tools) and sends the result back as a `tool` message. The model is a
deterministic stand-in for both."""

from __future__ import annotations

from towline import Agent, tool
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "web_agent", "pick_color"]


@tool(executor="client")
def pick_color(prompt: str) -> dict[str, str]:
    """Show the user a color picker; returns {"color": ...}. The client runs it."""
    raise NotImplementedError("the client runs this tool")


def _model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, ToolReturnPart)]
    if not any(t.name == "pick_color" for t in info.tools):
        return "I have no color picker here: offer me pick_color."
    if not returns:
        return ModelResponse(parts=[ToolCallPart(tool_name="pick_color", tool_call_id="pick_1",
                                                 args={"prompt": "Which color?"})])
    if returns[-1].status != "succeeded":  # the client answered with an error (or timed out)
        return f"The color picker failed: {returns[-1].content}"
    picked = returns[-1].content
    color = picked.get("color") if isinstance(picked, dict) else picked
    return f"You picked {color}."


agent = Agent(name="frontend", model=FunctionModel(_model, model_name="frontend-offline"),
              tools=[pick_color])

web_agent = Agent(name="frontend-web", model=FunctionModel(_model, model_name="frontend-offline"))
"""The same model with no tools: the front end offers `pick_color` (an AG-UI client's `tools`)."""
