"""Issue 41, item 2: `AgentRun` composes named parts instead of inheriting four mixin layers.

The workflow class has no base but `object`. Its handlers keep the contract's names (clients call
them by reference: `AgentRun.state`, `AgentRun.approve`) and are the workflow's own methods, as
Temporal requires, each handing the work to the part that owns it: the session
(`handlers.Session`: `send`, `end`, `cancel`, the inbox and answers), the approvals desk
(`approval_updates.ApprovalDesk`: the decisions, the policy, the waits) and the hook API
(`hook_api.HookApi`: what `towline.hook_context()` acts on). Behaviour is checked by the HITL,
session, steering, client-tool and hook-context tests; this checks the shape.
"""

from __future__ import annotations

import inspect

from temporalio import workflow

from towline.workflows import AgentRun
from towline.workflows.approval_updates import ApprovalDesk
from towline.workflows.handlers import Session
from towline.workflows.hook_api import HookApi

QUERIES = {"state", "messages", "towline.model_request_input", "towline.request_messages"}
SIGNALS = {"cancel", "end"}
UPDATES = {"send", "approve", "reject", "edit", "respond", "decide", "tool_result", "set_policy"}


def test_agent_run_inherits_nothing() -> None:
    assert AgentRun.__mro__ == (AgentRun, object)
    for part in (Session, ApprovalDesk, HookApi):
        assert part.__mro__ == (part, object), part


def test_every_handler_is_the_workflows_own_method() -> None:
    defn = workflow._Definition.must_from_class(AgentRun)  # pyright: ignore[reportPrivateUsage]
    assert set(defn.queries) == QUERIES
    assert set(defn.signals) == SIGNALS
    assert set(defn.updates) == UPDATES
    handlers = [*defn.queries.values(), *defn.signals.values(), *defn.updates.values()]
    functions = [h.fn for h in handlers] + [u.validator for u in defn.updates.values()]
    assert all(f is not None for f in functions)
    owners = {f.__qualname__.split(".")[0] for f in functions if f is not None}
    assert owners == {"AgentRun"}
    # every update is validated, and every validator takes what its update takes
    for name, update in defn.updates.items():
        assert update.validator is not None, name
        params = list(inspect.signature(update.fn).parameters)
        assert list(inspect.signature(update.validator).parameters) == params, name


def test_the_parts_own_the_work_and_not_the_workflow() -> None:
    """Each part is built from what it needs, never from the workflow itself."""
    for part in (Session, ApprovalDesk, HookApi):
        params = inspect.signature(part.__init__).parameters
        assert "agent_run" not in params and "workflow" not in params, part
    # the decision updates' work is the desk's, the session's is the session's
    for name in UPDATES - {"send"}:
        assert callable(getattr(ApprovalDesk, name)), name
        assert callable(getattr(ApprovalDesk, f"validate_{name}")), name
    for name in ("send", "validate_send", "cancel", "end", "next_message", "drain_inbox"):
        assert callable(getattr(Session, name)), name
    for name in ("request_approval", "is_approved", "gate", "authority", "guard_request",
                 "report_usage", "hand_off", "agent_run"):
        assert hasattr(HookApi, name), name
