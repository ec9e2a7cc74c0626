"""Activities run only for runs: a client cannot call them directly.

Temporal lets anyone with access to a namespace execute an activity by type
name (`temporal activity execute --type towline.tool.transfer ...`). That would
run a tool with a made-up `ToolContext`, past every hook and approval, or make a
worker call a model with a made-up request. towline's model and tool activities
therefore run only when an `AgentRun` workflow scheduled them, and refuse
otherwise, non-retryably.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

__all__ = ["require_agent_run", "NOT_FROM_A_RUN"]

NOT_FROM_A_RUN = "NotScheduledByAgentRun"
"""The error type of an activity call that did not come from an `AgentRun`."""


def require_agent_run() -> None:
    """Raise (non-retryably) unless the running activity was scheduled by an `AgentRun`."""
    info = activity.info()
    if info.workflow_type != "AgentRun" or not info.workflow_id:
        raise ApplicationError(
            f"{info.activity_type} runs only as part of an AgentRun workflow "
            f"(it was called by {info.workflow_type or 'a client, outside any workflow'})",
            type=NOT_FROM_A_RUN, non_retryable=True,
        )
