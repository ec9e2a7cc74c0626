"""Workflow side: the `AgentRun` workflow and its deterministic turn engine."""

from .agent_run import AgentRun, SendInput
from .decisions import (
    ApprovalDecision,
    Decision,
    Decisions,
    DenyWith,
    EditDecision,
    PolicyUpdate,
    RespondDecision,
    ToolResultInput,
    call_digest,
)
from .model_call import call_model

__all__ = ["AgentRun", "ApprovalDecision", "EditDecision", "RespondDecision", "Decision",
           "Decisions", "DenyWith", "PolicyUpdate", "ToolResultInput", "call_digest", "SendInput",
           "call_model", "current_run"]


def current_run() -> AgentRun:
    """The `AgentRun` executing the calling hook (hooks run as workflow code)."""
    from temporalio import workflow

    instance = workflow.instance()
    if not isinstance(instance, AgentRun):
        raise TypeError("not inside an AgentRun workflow")
    return instance
