"""Agents for issue 40's wrong-words checks (`tests/test_i40_words.py`)."""

from __future__ import annotations

from towline import Agent
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo, TestModel


def _first(messages: list[Message], info: ModelInfo) -> str:
    return "first"


def _second(messages: list[Message], info: ModelInfo) -> str:
    return "second"


twin_a = Agent(name="i40-twin-a", model=FunctionModel(_first, model_name="i40-twin"))
twin_b = Agent(name="i40-twin-b", model=FunctionModel(_second, model_name="i40-twin"))
"""Two agents whose different models share one name: a worker cannot serve both."""

spaced = Agent(name="Triage Agent", model=TestModel())
"""An agent whose name holds a space (the OpenAI Agents SDK's examples name theirs so)."""
