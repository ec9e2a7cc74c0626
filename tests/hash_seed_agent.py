"""An agent whose hook iterates a set of strings (for tests/test_guard_holes.py).

Its `Words` capability takes the first of five words in a set's order, waits on that
many durable timers (its index in `WORDS`), and makes it the run's instructions, which
the model answers with. The set's order follows the process's string-hash seed
(`PYTHONHASHSEED`), which the guard cannot see; `towline worker` and `towline replay`
(with `tests/` on PYTHONPATH: `--agent hash_seed_agent:agent`) pin that seed.
"""

from __future__ import annotations

import asyncio

from towline import Agent, Capability, ModelRequestState
from towline.messages import Message, ModelRequest
from towline.models import FunctionModel, ModelInfo

__all__ = ["WORDS", "first_word", "agent"]

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon")


def first_word() -> str:
    """The set's first word in this process (the issue's expression, word for word)."""
    return next(iter({"alpha", "beta", "gamma", "delta", "epsilon"}))


class Words(Capability):
    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        first = first_word()  # the order of a set of str: the process's hash seed
        for _ in range(WORDS.index(first)):
            await asyncio.sleep(0.001)  # a durable timer per step: the history shows the path
        return state.model_copy(update={"agent": state.agent.model_copy(
            update={"instructions": first})})


def echo(messages: list[Message], info: ModelInfo) -> str:
    """Answers with the request's first part: the instructions `Words` set."""
    first = messages[0]
    assert isinstance(first, ModelRequest)
    return str(first.parts[0].content)


agent = Agent(name="guard-hash-seed", model=FunctionModel(echo, model_name="guard-hash-seed"),
              capabilities=[Words()])
