"""Agents of tests/test_first_hour.py (issue 30): the calculator asking before it multiplies,
whose answer after the approved call takes a while, so that `towline run` polls the run while
it goes on (the allowed call's return there, the answer not yet)."""

from __future__ import annotations

import asyncio

from examples.calculator import add, arithmetic_model, evaluate, multiply
from towline import Agent
from towline.capabilities import ToolApproval
from towline.messages import Message, ModelRequest, ModelResponse, ToolReturnPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["slow_careful", "ANSWER_DELAY"]

ANSWER_DELAY = 2.0
"""Seconds the model takes to answer once a tool returned (several of `towline run`'s polls)."""


async def _answer_slowly(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The calculator's model, taking `ANSWER_DELAY` to phrase a tool's result."""
    if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest)
           for p in m.parts):
        await asyncio.sleep(ANSWER_DELAY)
    return arithmetic_model(messages, info)


slow_careful = Agent(
    name="slow-careful-calculator",
    model=FunctionModel(_answer_slowly, model_name="slow-careful-offline"),
    instructions="You are a calculator. Use the tools for every computation; never guess.",
    tools=[add, multiply, evaluate],
    capabilities=[ToolApproval(tools=["multiply"])],
)
"""Asks before every multiplication; answers `ANSWER_DELAY` after the call returned."""
