"""The human in the loop, on the workflow side: calls waiting for a person (or a client),
the decisions that answer them, remembered decisions, and the audit trail.

A call that must wait is *pending*: `Run.approvals.pending[call_id]` holds what a reviewer
needs (tool, validated arguments, step, digest, a short index, what may be decided) and the
`state` query shows it. The waiting coroutine (`ask`) sleeps on a timer whose summary names
the call (visible in the UI's timeline) until an update resolves it (`Resolution`), the
timeout fires, or the run is cancelled. A resolution is taken once, by the wait that asked:
a decision re-sent afterwards finds nothing pending and is refused, so an approval allows
exactly the one execution it was made for.

Every decision, a person's or a rule's, becomes an audit entry (`Approvals.hitl.audit`): recorded in
memo `towline.decisions` with the run's next confirmed transition (so it is in the history
and readable without a worker), in the `state` query, and as the live `decision` event.
Each entry is bounded and the trail keeps its newest entries within its byte budgets
(`audit_bounds`), so that it can never grow past what Temporal takes in a memo; remembered
decisions are kept within their own bounds (`remember`), and what a continued execution's
input carries is bounded again when it starts (`restore_approvals`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

from towline.errors import Cancelled, runtime_failure
from towline.events import EventType, preview
from towline.results import RunStatus
from towline.telemetry import tracing as telemetry
from towline.tools import ToolCall, ToolContext

from .audit_bounds import AUDIT_KEEP, bounded, kept, remembered_kept
from .decisions import DECISION_KINDS, DecisionKind, call_digest, matches
from .events import emit
from .run import Run
from .waiting import DECISIONS_MEMO

__all__ = ["Resolution", "Pending", "AUDIT_KEEP", "APPROVAL_TIMER", "DECISIONS_MEMO", "short_args",
           "audit", "remembered_entry", "remember", "remembered_for", "forget_turn", "register", "wait_for", "carried",
           "restore_approvals", "overdue"]

APPROVAL_TIMER = timedelta(days=365)
"""A wait without a timeout is a timer of this length that re-arms: the timer and its summary
are what show the wait in the UI's timeline."""


def short_args(args: Mapping[str, Any], limit: int = 60) -> str:
    """`a=1, b="x"` cut at `limit` characters (activity and timer summaries)."""
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Resolution:
    """How a pending call was resolved."""

    kind: str
    """approve, reject, edit, respond, result (a client tool's), timeout."""
    reason: str | None = None
    args: dict[str, Any] | None = None
    """edit: the arguments the call runs with."""
    result: Any = None
    """respond / result: the call's return."""
    message: str | None = None
    """reject: what the model is told, given with the decision."""


@dataclass(frozen=True)
class Pending:
    """What `register` made pending: the call's id and digest."""

    call_id: str
    digest: str


def overdue(entry: Mapping[str, Any]) -> bool:
    """Whether a pending call's deadline (`expires_at`) has passed at the workflow's time now.

    Judged by the time of the workflow task that applies a decision, not by when it was
    sent: a worker that was down or busy past the deadline finds the call's timeout and a
    late decision in one task, and the late decision must not win."""
    expires = entry.get("expires_at")
    return expires is not None and workflow.now() >= datetime.fromisoformat(expires)


def audit(run: Run, entry: dict[str, Any]) -> dict[str, Any]:
    """Record an audit entry (workflow time) and publish it as the `decision` event."""
    entry = {k: v for k, v in {**entry, "at": workflow.now().isoformat()}.items() if v is not None}
    entry = bounded(entry)  # and the trail kept within its budgets (`audit_bounds`)
    run.approvals.hitl.audit = kept([*run.approvals.hitl.audit, entry])
    run.approvals.hitl.total += 1
    emit(run.stream, EventType.DECISION,
         **{k: preview(v) if k in ("result", "args", "original_args") else v
            for k, v in entry.items() if k != "step"}, step=entry.get("step"))
    return entry


def remembered_entry(pending: Mapping[str, Any], kind: str, call_id: str, *, scope: str,
                     pattern: Any, reason: str | None, args: Mapping[str, Any] | None,
                     result: Any, message: str | None, by: str | None) -> dict[str, Any]:
    """What remembering a decision of the pending call `pending` records (the update's
    validator measures the same entry: `audit_bounds.remember_refusal`)."""
    changes = ({k: v for k, v in args.items() if pending["args"].get(k) != v}
               if args is not None else None)
    return {k: v for k, v in {
        "tool": pending["tool_name"], "pattern": pattern, "kind": kind, "scope": scope,
        "reason": reason, "changes": changes, "result": result if kind == "respond" else None,
        "by": by, "message": message, "call_id": call_id, "at": workflow.now().isoformat(),
    }.items() if v is not None}


def remember(run: Run, entry: dict[str, Any]) -> None:
    """Remember a decision for later calls, keeping the newest within the bounds of
    `audit_bounds` (they are carried across continue-as-new)."""
    run.approvals.hitl.remembered = remembered_kept([*run.approvals.hitl.remembered, entry])


def remembered_for(run: Run, tool: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The newest remembered decision that covers a call of `tool` with `args`, if any."""
    for entry in reversed(run.approvals.hitl.remembered):
        if entry["tool"] == tool and matches(entry.get("pattern"), args):
            return entry
    return None


def carried(run: Run) -> dict[str, Any] | None:
    """What continue-as-new carries of the run's approvals (`ResumeState.approvals`)."""
    if not (run.approvals.hitl.total or run.approvals.hitl.remembered or run.approvals.hitl.policy or run.approvals.hitl.seq):
        return None
    return {"policy": run.approvals.hitl.policy, "remembered": run.approvals.hitl.remembered, "audit": run.approvals.hitl.audit,
            "audit_total": run.approvals.hitl.total, "approval_seq": run.approvals.hitl.seq}


def restore_approvals(run: Run, state: dict[str, Any] | None) -> None:
    """A continued execution takes the run's approvals from its input."""
    state = state or {}
    run.approvals.hitl.policy, run.approvals.hitl.remembered = dict(state.get("policy") or {}), list(state.get("remembered") or [])
    run.approvals.hitl.audit, run.approvals.hitl.total = list(state.get("audit") or []), int(state.get("audit_total") or 0)
    run.approvals.hitl.seq = int(state.get("approval_seq") or 0)
    run.approvals.hitl.recorded = (run.approvals.hitl.total, None)  # the start request's memo holds the trail already
    # what the input carried is bounded too
    audit = kept([bounded(e) for e in run.approvals.hitl.audit])
    run.approvals.hitl.remembered = remembered_kept(run.approvals.hitl.remembered)
    if audit != run.approvals.hitl.audit:  # the memo the start request copied is not: write it again
        run.approvals.hitl.audit, run.approvals.hitl.recorded = audit, (-1, None)


def forget_turn(run: Run) -> None:
    """The run answered its turn: decisions remembered for the `run` are forgotten."""
    run.approvals.hitl.remembered = [r for r in run.approvals.hitl.remembered if r.get("scope") != "run"]


def register(run: Run, ctx: ToolContext, call: ToolCall, *, kind: str,
             decisions: tuple[DecisionKind, ...] = DECISION_KINDS,
             timeout: timedelta | None = None,
             metadata: Mapping[str, Any] | None = None) -> Pending:
    """Make `call` pending (an approval, or a client tool's result) and announce it, with the
    `metadata` its rule attached for the reviewer."""
    digest = call_digest(workflow.info().run_id, call.tool_call_id, call.tool_name, call.args,
                         ctx.run_step)
    run.approvals.hitl.seq += 1
    entry: dict[str, Any] = {
        "tool_name": call.tool_name, "args": call.args, "run_step": ctx.run_step,
        "requested_at": workflow.now().isoformat(), "digest": digest, "index": run.approvals.hitl.seq,
        "kind": kind, "decisions": list(decisions) if kind == "approval" else ["respond"],
    }
    if timeout is not None:
        entry["expires_at"] = (workflow.now() + timeout).isoformat()
    shown = dict(metadata) if metadata is not None else None
    if shown is not None:
        entry["metadata"] = shown
    run.approvals.pending[call.tool_call_id] = entry
    run.approvals.waiting_for = "approval" if kind == "approval" else "tool_result"
    run.ledger.confirm(RunStatus.WAITING)
    emit(run.stream, EventType.APPROVAL if kind == "approval" else EventType.CLIENT_TOOL,
         step=ctx.run_step, call_id=call.tool_call_id, tool=call.tool_name, args=call.args,
         digest=digest,
         index=run.approvals.hitl.seq, decisions=entry["decisions"],
         **({"metadata": shown} if shown is not None else {}))
    return Pending(call.tool_call_id, digest)


async def wait_for(run: Run, resolutions: dict[str, Resolution], pending: Pending, call: ToolCall,
                   timeout: timedelta | None, cancelled: Any) -> Resolution:
    """Wait durably until `pending` is resolved (or times out, or the run is cancelled)."""
    kind = run.approvals.pending[pending.call_id]["kind"]
    what = "approval" if kind == "approval" else "client tool result"
    summary = f"{what}: {call.tool_name}({short_args(call.args)}) · call {call.tool_call_id}"
    asked = workflow.now()
    resolution: Resolution | None = None
    while resolution is None:
        try:
            await workflow.wait_condition(
                lambda: pending.digest in resolutions or cancelled(),
                timeout=timeout or APPROVAL_TIMER, timeout_summary=summary[:200])
        except TimeoutError:
            if timeout is None:
                continue  # no timeout: the timer re-arms, and the wait goes on
            resolution = Resolution("timeout", reason=f"no decision within {timeout}")
            break
        if cancelled():
            _settle(run, pending)
            raise runtime_failure(Cancelled("the run was cancelled"))
        resolution = resolutions.pop(pending.digest)
        if timeout is not None and workflow.now() - asked >= timeout:
            # a decision taken past the deadline is too late, however it got here
            resolution = Resolution("timeout", reason=f"no decision within {timeout}")
    outcome = {"approve": "approved", "reject": "rejected", "edit": "edited",
               "respond": "responded", "deny": "denied"}.get(resolution.kind, resolution.kind)
    telemetry.approval_waited(run.agent.name, call.tool_name, outcome, workflow.now() - asked)
    _settle(run, pending)
    return resolution


def _settle(run: Run, pending: Pending) -> None:
    run.approvals.pending.pop(pending.call_id, None)
    if not run.approvals.pending:
        run.approvals.waiting_for = None
    run.ledger.confirm(RunStatus.WAITING if run.approvals.pending else RunStatus.RUNNING)
