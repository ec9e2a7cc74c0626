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
from .hook_api import HookApi
from .model_call import call_model

__all__ = ["AgentRun", "ApprovalDecision", "EditDecision", "RespondDecision", "Decision",
           "Decisions", "DenyWith", "PolicyUpdate", "ToolResultInput", "call_digest", "SendInput",
           "call_model", "current_run"]


def current_run() -> HookApi:
    """What hook code may do in the `AgentRun` executing the calling hook (hooks run as
    workflow code): its `HookApi` part (`request_approval`, `is_approved`, `gate`, `agent_run`,
    ...), from the run's scope (`workflows.scope`). Hook code has a public way to what it
    offers: `towline.hook_context()`."""
    from .scope import hooks

    found = hooks()
    if not isinstance(found, HookApi):
        raise TypeError("not inside an AgentRun workflow")
    return found
