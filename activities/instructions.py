"""The `towline.instructions` activity: runs an agent's instructions function on the worker.

One activity serves every agent of a plugin whose `instructions` is a function
(`towline.runtime.instructions`). The function gets the run's context, typed by the agent's
`context_type`, and the worker's dependencies (`towline.runtime.deps`); a sync function runs
in a thread, so a slow lookup does not hold up the worker's event loop. Its text is the
activity's result: recorded in the run's history, read from there on replay. Anything but
text is refused non-retryably (calling it again would return the same); an exception it
raises is left to Temporal's retry policy (a database that is briefly away), after which
the run fails with `InstructionsFailed`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from towline.agent import Agent
from towline.runtime.deps import current_deps, typed_context
from towline.runtime.instructions import (
    INSTRUCTIONS_ACTIVITY,
    InstructionsContext,
    InstructionsInput,
)

from .guard import require_agent_run

__all__ = ["make_instructions_activity", "NO_INSTRUCTIONS", "NOT_TEXT"]

NO_INSTRUCTIONS = "NoInstructionsFunction"
"""Error type: the worker knows no instructions function for the agent named."""
NOT_TEXT = "InstructionsNotText"
"""Error type: the instructions function returned something other than text."""


def make_instructions_activity(
    agents: Iterable[Agent],
) -> Callable[[InstructionsInput], Awaitable[str]]:
    """The activity running the instructions functions of `agents` (those that have one)."""
    functions: dict[str, Callable[[InstructionsContext], Any]] = {
        a.name: a.instructions for a in agents if callable(a.instructions)}

    @activity.defn(name=INSTRUCTIONS_ACTIVITY)
    async def run_instructions(inp: InstructionsInput) -> str:
        require_agent_run()
        fn = functions.get(inp.agent)
        if fn is None:
            raise ApplicationError(f"agent {inp.agent!r} has no instructions function on this "
                                   "worker", type=NO_INSTRUCTIONS, non_retryable=True)
        ctx = InstructionsContext(run_id=activity.info().workflow_id or "", agent=inp.agent,
                                  context=typed_context(inp.agent, inp.context),
                                  deps=current_deps())
        if inspect.iscoroutinefunction(fn):
            text = await fn(ctx)
        else:  # in a thread (the context variables copied), like a sync tool
            text = await asyncio.to_thread(fn, ctx)
            if inspect.isawaitable(text):
                text = await text
        if not isinstance(text, str):
            raise ApplicationError(f"the instructions function of agent {inp.agent!r} returned "
                                   f"{type(text).__name__}, not text", type=NOT_TEXT,
                                   non_retryable=True)
        return text

    return run_instructions
