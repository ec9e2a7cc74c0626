"""Agents that stream, for the streaming tests: a slow writer whose text takes a while."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from towline import Agent, ModelSettings
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo

__all__ = ["slow_writer", "WORDS"]

WORDS = ["one", "two", "three", "four", "five", "six"]


def slow_writer(name: str, pace: float = 0.25) -> Agent:
    """Answers `one two three four five six`, a word every `pace` seconds, streaming."""

    async def write(messages: list[Message], info: ModelInfo) -> AsyncIterator[str]:
        for i, word in enumerate(WORDS):
            await asyncio.sleep(pace)
            yield word if i == 0 else f" {word}"

    return Agent(name=name, model=FunctionModel(write, model_name="slow-writer"),
                 settings=ModelSettings(stream=True))
