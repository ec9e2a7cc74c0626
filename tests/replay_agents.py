"""One agent (`replay-demo`) in three definitions, as a deploy would change it.

- `original`: what the recorded runs were started with.
- `compatible`: a tool added (the agent's version changes; the commands its old runs
  emit do not), so its old runs replay.
- `incompatible`: a capability that waits on a timer before every model request: old
  histories have no such timer, so they no longer replay.

`towline replay --agent replay_agents:compatible` (with `tests/` on PYTHONPATH) is how
the tests exercise the CLI on them.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from towline import Agent, Capability, ModelRequestState, tool
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["original", "compatible", "incompatible"]


@tool
def weather(city: str) -> str:
    """The weather in `city`."""
    return f"sunny in {city}"


@tool
def forecast(city: str) -> str:
    """Tomorrow's weather in `city` (the compatible change: a new tool)."""
    return f"rain in {city}"


def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    returns = [p for m in messages if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart(tool_name="weather", args={"city": "Oslo"})])
    return f"it is {returns[0].content}"


class Pause(Capability):
    """The incompatible change: a durable timer before each model request."""

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await workflow.sleep(timedelta(milliseconds=10))
        return state


def _model() -> FunctionModel:
    return FunctionModel(script, model_name="replay-demo-model")


original = Agent(name="replay-demo", model=_model(), tools=[weather])
compatible = Agent(name="replay-demo", model=_model(), tools=[weather, forecast])
incompatible = Agent(name="replay-demo", model=_model(), tools=[weather], capabilities=[Pause()])
