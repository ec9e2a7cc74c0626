"""Dynamic instructions: `Agent(instructions=function)`, run by the worker as an activity.

Instructions built from a database lookup (the user's name, their account's tier) are I/O,
which workflow code must not do. A function given as an agent's `instructions` runs as the
`towline.instructions` activity once per run, before the run's first model request (and
once more for an agent the run is handed to): it receives an `InstructionsContext` with the
run's typed context and the worker's dependencies, and returns the text. The text is the
activity's result, so it is in the history: a replay reads it there and never calls the
function again, and continue-as-new carries it on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["InstructionsContext", "InstructionsFunc", "InstructionsInput", "INSTRUCTIONS_ACTIVITY"]

INSTRUCTIONS_ACTIVITY = "towline.instructions"
"""The activity that runs an agent's instructions function."""


class InstructionsContext(BaseModel):
    """What an instructions function receives (OpenAI's `RunContextWrapper`, Pydantic AI's
    `RunContext` in an `@agent.instructions` function)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    run_id: str
    """The workflow id of the run."""
    agent: str
    """The agent whose instructions these are."""
    context: Any = None
    """The run's context: an instance of the agent's `context_type` (None without one)."""
    deps: Any = Field(default=None, exclude=True, repr=False)
    """The worker's dependencies (`TowlinePlugin(deps=...)`), never serialised."""


InstructionsFunc = Callable[[InstructionsContext], "str | Awaitable[str]"]
"""An agent's instructions function: sync or async, returning the instructions' text."""


class InstructionsInput(BaseModel):
    """Input of `towline.instructions`: the agent and the run's context as JSON."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    """The agent whose instructions function to run."""
    context: Any = None
    """The run's context as JSON (validated again with the agent's `context_type`)."""
