"""The text of an instructions function (`Agent(instructions=function)`), asked once.

Before a turn of an agent whose instructions are a function, and only if the run has no
text of that agent's yet, the run schedules the `towline.instructions` activity
(`towline.activities.instructions`) with its context. The answer is kept in
`Run.instructions` (by agent name: an agent the run is handed to asks once too) and carried
across continue-as-new, so the function runs once per run and agent; being an activity's
result, it is in the history and a replay never calls the function again.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic_core import to_jsonable_python
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from towline.errors import InstructionsFailed
from towline.runtime.instructions import INSTRUCTIONS_ACTIVITY, InstructionsInput

from .run import Run

__all__ = ["resolve_instructions", "INSTRUCTIONS_TIMEOUT", "INSTRUCTIONS_ATTEMPTS"]

INSTRUCTIONS_TIMEOUT = timedelta(minutes=1)
"""How long one attempt of an instructions function may take."""
INSTRUCTIONS_ATTEMPTS = 3
"""Attempts (Temporal's retries) before the run fails `InstructionsFailed`."""


async def resolve_instructions(run: Run) -> None:
    """Ask the worker for the active agent's instructions, if they are a function not yet
    answered in this run; `InstructionsFailed` if it fails past its retries."""
    agent = run.agent
    if not callable(agent.instructions) or agent.name in run.instructions:
        return
    context = None if run.context is None else to_jsonable_python(run.context)
    try:
        text = await workflow.execute_activity(
            INSTRUCTIONS_ACTIVITY, InstructionsInput(agent=agent.name, context=context),
            result_type=str, start_to_close_timeout=INSTRUCTIONS_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=INSTRUCTIONS_ATTEMPTS),
            summary=f"{agent.name} · instructions", priority=run.dispatch.priority,
        )
    except ActivityError as e:
        cause = e.cause
        why = cause.message if isinstance(cause, ApplicationError) else str(cause or e)
        raise InstructionsFailed(f"the instructions function of agent {agent.name!r} failed: "
                                 f"{why}") from None
    run.instructions[agent.name] = text
