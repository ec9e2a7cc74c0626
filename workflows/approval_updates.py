"""The approvals desk of an `AgentRun` (`ApprovalDesk`, a part the workflow composes): what its
human-in-the-loop updates do, and the gate `ToolApproval` calls.

Updates (`AgentRun`'s, which hand each to the desk): `approve`, `reject`, `edit`, `respond`, `decide` (several at once), `set_policy`,
`tool_result` (`decisions` has their arguments). Each validator refuses, changing nothing, a
decision for a call that is not pending, already decided, or whose digest differs, a kind of
decision the call's rule does not allow, edited arguments its tool's schema refuses and a
response its output type refuses, and a reason or `by` longer than the audit trail records
(`audit_bounds`); a `decide` batch is applied whole or not at all. The
handlers only record a `Resolution` and an audit entry: the waiting call (`approvals.wait_for`)
acts on it in its own coroutine.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from temporalio import workflow

from towline.capabilities.approval_rules import RuleAnswer
from towline.errors import InternalError, ToolDenied, ToolResponded
from towline.tools import ToolCall, ToolContext

from .approvals import (
    Resolution,
    audit,
    overdue,
    register,
    remember,
    remembered_entry,
    remembered_for,
    wait_for,
)
from .decision_checks import as_decision, check_decisions, decoded
from .decisions import (
    DECIDED,
    ApprovalDecision,
    Decision,
    Decisions,
    EditDecision,
    PolicyUpdate,
    RespondDecision,
    ToolResultInput,
)
from .hooks import check_jsonable
from .run import Run
from .steering import Steering


@runtime_checkable
class ApprovalPolicy(Protocol):
    """What the gate asks of a policy (`ToolApproval` is one)."""

    @property
    def timeout(self) -> timedelta | None:
        """How long a call waits for a decision (None: indefinitely)."""
        ...

    def answer(self, tool: str, args: dict[str, Any], live: Mapping[str, Any]) -> RuleAnswer:
        """The policy's answer for one call."""
        ...


__all__ = ["ApprovalDesk", "ApprovalPolicy"]


class ApprovalDesk:
    """The run's decisions: the gate and the waits for a person's decision or a client tool's
    result, and what the decision updates (`approve` ... `set_policy`, `tool_result`) and their
    validators do. `AgentRun` builds it, hands it the run's `Run` once it exists (`run`), and
    its update handlers call it."""

    def __init__(self, steering: Steering) -> None:
        self.steering = steering
        """The run's steering: a waiting call stops waiting when the run is cancelled."""
        self.run: Run | None = None
        """The run's state, once `AgentRun` has built it."""
        self._resolutions: dict[str, Resolution] = {}
        """Decisions made, by the digest of the call they resolve, until its wait takes them."""
        self._approved: set[str] = set()
        """The calls whose `request_approval` decision was an approval (`is_approved`)."""

    def _require_run(self) -> Run:
        if self.run is None:
            raise InternalError("the run has not started")
        return self.run

    def is_approved(self, call_id: str) -> bool:
        """Whether the decision on `call_id` was an approval."""
        return call_id in self._approved

    # --- the gate ------------------------------------------------------------------------

    async def gate(self, ctx: ToolContext, call: ToolCall, policy: ApprovalPolicy) -> ToolCall:
        """Apply `policy` to `call`: the call to run (maybe edited), or raise `ToolDenied` /
        `ToolResponded`."""
        run = self._require_run()
        answer = policy.answer(call.tool_name, call.args, run.approvals.hitl.policy)
        base = {"call_id": call.tool_call_id, "tool": call.tool_name, "step": ctx.run_step}
        if answer.verdict == "approve":
            if answer.audited:
                audit(run, {**base, "decision": "approved", "source": answer.source})
            return call
        if answer.verdict == "deny":
            audit(run, {**base, "decision": "denied", "source": answer.source, "reason": answer.message})
            raise ToolDenied(answer.message or "denied by the run's approval policy")
        remembered = remembered_for(run, call.tool_name, call.args)
        if remembered is not None:
            resolution = self._from_remembered(run, call, base, remembered)
        else:
            timeout = answer.timeout or policy.timeout
            pending = register(run, ctx, call, kind="approval", decisions=answer.decisions,  # pyright: ignore[reportArgumentType]
                               timeout=timeout, metadata=answer.metadata)
            resolution = await wait_for(run, self._resolutions, pending, call, timeout,
                                        lambda: self.steering.cancelled)
            if resolution.kind == "timeout":
                audit(run, {**base, "decision": "timed_out", "source": "timeout",
                            "digest": pending.digest, "reason": resolution.reason})
                raise ToolDenied(f"not approved: no decision within {timeout}")
        return self._outcome(call, resolution, answer.rejection_message)

    def _from_remembered(self, run: Run, call: ToolCall, base: dict[str, Any],
                         remembered: dict[str, Any]) -> Resolution:
        kind: str = remembered["kind"]
        changes: dict[str, Any] = remembered.get("changes") or {}
        args: dict[str, Any] | None = {**call.args, **changes} if kind == "edit" else None
        audit(run, {**base, "decision": DECIDED[kind], "source": "remembered",
                    "by": remembered.get("by"), "reason": remembered.get("reason"),
                    "remembered_from": remembered.get("call_id"), "args": args,
                    "original_args": call.args if args is not None else None})
        return Resolution(kind, reason=remembered.get("reason"), args=args,
                          result=remembered.get("result"), message=remembered.get("message"))

    @staticmethod
    def _outcome(call: ToolCall, resolution: Resolution, rejection: str | None = None) -> ToolCall:
        """The call to run, or the denial the model is told. A rejection's text: the decision's
        `message`, else the tool's configured one (`rejection`), else the reviewer's reason."""
        if resolution.kind == "approve":
            return call
        if resolution.kind == "edit":
            return call.model_copy(update={"args": dict(resolution.args or {})})
        if resolution.kind == "respond":
            raise ToolResponded(resolution.result)
        if resolution.kind == "deny":  # the run's policy, changed while the call waited
            raise ToolDenied(resolution.reason or "denied by the run's approval policy")
        told = resolution.message or rejection
        raise ToolDenied(told or f"rejected by a reviewer: {resolution.reason or 'no reason given'}")

    async def request_approval(self, ctx: ToolContext, call: ToolCall,
                               timeout: timedelta | None, *,
                               metadata: Mapping[str, Any] | None = None) -> ApprovalDecision | None:
        """Wait durably for a person to approve or reject `call` (hook code's own gate); None
        means no decision within `timeout`. Bound to the call's digest, in the audit trail,
        and approve or reject only; `metadata` (JSON) is shown with the pending call, and a
        rejection's `message` is the decision's."""
        run = self._require_run()
        if metadata is not None:
            metadata = dict(check_jsonable(dict(metadata), "request_approval got metadata"))
        call_id = call.tool_call_id
        self._approved.discard(call_id)
        pending = register(run, ctx, call, kind="approval", decisions=("approve", "reject"),
                           timeout=timeout, metadata=metadata)
        resolution = await wait_for(run, self._resolutions, pending, call, timeout,
                                    lambda: self.steering.cancelled)
        if resolution.kind == "timeout":
            audit(run, {"call_id": call_id, "tool": call.tool_name, "step": ctx.run_step,
                        "decision": "timed_out", "source": "timeout", "digest": pending.digest,
                        "reason": resolution.reason})
            return None
        approved = resolution.kind == "approve"
        decision = ApprovalDecision(call_id=call_id,
                                    reason=resolution.reason or ("approved" if approved else "rejected"),
                                    message=resolution.message)
        if approved:
            self._approved.add(call_id)
        return decision

    async def client_result(self, ctx: ToolContext, call: ToolCall, timeout: Any, *,
                            metadata: Mapping[str, Any] | None = None) -> Resolution:
        """Wait durably for a client tool's result (`tool_result`, or `respond`); the call is
        shown with its tool's `metadata`."""
        run = self._require_run()
        pending = register(run, ctx, call, kind="client", timeout=timeout, metadata=metadata)
        return await wait_for(run, self._resolutions, pending, call, timeout,
                              lambda: self.steering.cancelled)

    # --- checking and applying decisions ---------------------------------------------------

    def _check(self, decisions: list[Decision], *, check_result: bool = True,
               by: str | None = None) -> None:
        """Refuse (ValueError, nothing changed) any decision the run cannot take (`check_result`
        False: a client's error or retry answer, with no result to check)."""
        check_decisions(self.run, self._resolutions, decisions, check_result=check_result, by=by)

    def _apply(self, decisions: list[Decision], by: str | None,
               client_answer: str = "result") -> list[dict[str, Any]]:
        """Record each decision's resolution, audit entry and (if asked) remembered rule; a
        client tool's call is resolved `client_answer` (result, error or retry)."""
        run = self._require_run()
        info = workflow.current_update_info()
        update_id = info.id if info is not None else None
        entries: list[dict[str, Any]] = []
        for d in decisions:
            entry = run.approvals.pending[d.call_id]
            client = entry["kind"] == "client"
            kind = client_answer if client else d.kind
            args = dict(d.args) if d.kind == "edit" and d.args is not None else None
            self._resolutions[entry["digest"]] = Resolution(
                kind, reason=d.reason, args=args, result=d.result, message=d.message)
            entries.append(audit(run, {
                "call_id": d.call_id, "tool": entry["tool_name"], "step": entry["run_step"],
                "decision": kind if client else DECIDED[d.kind], "source": "client" if client else "person",
                "by": by, "update_id": update_id, "reason": d.reason, "digest": entry["digest"],
                "args": args, "original_args": entry["args"] if args is not None else None,
                "result": d.result if d.kind == "respond" else None, "remember": d.remember,
                "pattern": d.pattern, "message": d.message,
            }))
            if d.remember is not None and not client:
                remember(run, remembered_entry(
                    entry, d.kind, d.call_id, scope=d.remember, pattern=d.pattern,
                    reason=d.reason, args=args, result=d.result, message=d.message, by=by))
        return entries

    # --- the updates (`AgentRun`'s handlers call these) ----------------------------------------

    def approve(self, decision: Any) -> str:
        """Approve a waiting tool call (an `ApprovalDecision`)."""
        d = decoded(ApprovalDecision, decision, "approve", accepted=True)
        self._apply([as_decision(d, "approve")], d.by)
        return "approved"

    def reject(self, decision: Any) -> str:
        """Reject a waiting tool call (recorded `denied`; the model is told)."""
        d = decoded(ApprovalDecision, decision, "reject", accepted=True)
        self._apply([as_decision(d, "reject")], d.by)
        return "rejected"

    def edit(self, decision: Any) -> str:
        """Approve a waiting tool call with other arguments (an `EditDecision`; both recorded)."""
        d = decoded(EditDecision, decision, "edit", accepted=True)
        self._apply([as_decision(d, "edit", args=d.args)], d.by)
        return "edited"

    def respond(self, decision: Any) -> str:
        """Give a waiting call its return without running the tool (a `RespondDecision`), or a
        client tool's call its result."""
        d = decoded(RespondDecision, decision, "respond", accepted=True)
        self._apply([as_decision(d, "respond", result=d.result)], d.by)
        return "responded"

    def decide(self, batch: Any) -> list[dict[str, Any]]:
        """Several decisions at once (`Decisions`), applied together; their audit entries."""
        b = decoded(Decisions, batch, "decide", accepted=True)
        return self._apply(b.decisions, b.by)

    def tool_result(self, result: Any) -> str:
        """The result of a pending client tool call (a `ToolResultInput`), or its error or a
        retry request."""
        r = decoded(ToolResultInput, result, "tool_result", accepted=True)
        self._apply([Decision(kind="respond", call_id=r.call_id, digest=r.digest,
                              result=r.result, reason=r.error or r.retry)], r.by,
                    client_answer=r.answer)
        return "accepted"

    def set_policy(self, update: Any) -> dict[str, Any]:
        """Change the run's own approval rules (a `PolicyUpdate`); calls waiting now are
        answered by them too. Returns the run's policy. An update that leaves the policy as it
        was is not recorded in the audit trail."""
        u = decoded(PolicyUpdate, update, "set_policy", accepted=True)
        run = self._require_run()
        before: dict[str, Any] = {"rules": run.approvals.hitl.policy.get("rules") or {},
                                  "default": run.approvals.hitl.policy.get("default")}
        rules: dict[str, Any] = dict(run.approvals.hitl.policy.get("rules") or {})
        for name, rule in u.rules.items():
            if rule is None:
                rules.pop(name, None)
            else:
                rules[name] = rule if isinstance(rule, str) else rule.model_dump()
        run.approvals.hitl.policy = {"rules": rules, "default": u.default or run.approvals.hitl.policy.get("default")}
        info = workflow.current_update_info()
        # an update that changes nothing is not recorded (repeated, it would flush the trail)
        if run.approvals.hitl.policy != before:
            audit(run, {"decision": "policy", "source": "person", "by": u.by,
                        "reason": u.reason, "update_id": info.id if info else None,
                        "rules": {k: (v if isinstance(v, str) or v is None else v.model_dump())
                                  for k, v in u.rules.items()},
                        "default": u.default})
        self._settle_by_policy(run)
        return run.approvals.hitl.policy

    def _settle_by_policy(self, run: Run) -> None:
        """Pending approvals the new policy answers without asking are resolved by it."""
        policy = next((c for c in run.agent.capabilities if isinstance(c, ApprovalPolicy)), None)
        if policy is None:
            return
        for call_id, entry in list(run.approvals.pending.items()):
            if entry["kind"] != "approval" or entry["digest"] in self._resolutions:
                continue
            if overdue(entry):  # timed out already: its timeout answers it
                continue
            answer = policy.answer(entry["tool_name"], entry["args"], run.approvals.hitl.policy)
            if answer.verdict == "ask" or answer.source != "policy":
                continue
            kind = "approve" if answer.verdict == "approve" else "deny"
            self._resolutions[entry["digest"]] = Resolution(kind, reason=answer.message)
            audit(run, {"call_id": call_id, "tool": entry["tool_name"], "step": entry["run_step"],
                        "decision": "approved" if kind == "approve" else "denied",
                        "source": "policy", "digest": entry["digest"], "reason": answer.message})

    # --- validators --------------------------------------------------------------------------

    def validate_approve(self, decision: Any) -> None:
        d = decoded(ApprovalDecision, decision, "approve")
        self._check([as_decision(d, "approve")], by=d.by)

    def validate_reject(self, decision: Any) -> None:
        d = decoded(ApprovalDecision, decision, "reject")
        self._check([as_decision(d, "reject")], by=d.by)

    def validate_edit(self, decision: Any) -> None:
        d = decoded(EditDecision, decision, "edit")
        self._check([as_decision(d, "edit", args=d.args)], by=d.by)

    def validate_respond(self, decision: Any) -> None:
        d = decoded(RespondDecision, decision, "respond")
        self._check([as_decision(d, "respond", result=d.result)], by=d.by)

    def validate_decide(self, batch: Any) -> None:
        b = decoded(Decisions, batch, "decide")
        self._check(b.decisions, by=b.by)

    def validate_tool_result(self, result: Any) -> None:
        r = decoded(ToolResultInput, result, "tool_result")
        run = self.run
        entry = run.approvals.pending.get(r.call_id) if run is not None else None
        if entry is not None and entry.get("kind") != "client":
            raise ValueError(f"tool call {r.call_id!r} waits for a reviewer's decision, not "
                             "a client's result (respond to it with the respond update)")
        self._check([Decision(kind="respond", call_id=r.call_id, digest=r.digest, result=r.result)],
                    check_result=r.answer == "result")

    def validate_set_policy(self, update: Any) -> None:
        u = decoded(PolicyUpdate, update, "set_policy")
        run = self._require_run()
        if not any(isinstance(c, ApprovalPolicy) for c in run.agent.capabilities):
            raise ValueError(f"agent {run.agent.name!r} has no ToolApproval capability: "
                             "there is no approval policy to change")
        unknown = sorted(set(u.rules) - set(run.inventory.tools))
        if unknown:
            raise ValueError(f"no tool {', '.join(map(repr, unknown))} in this run "
                             f"(its tools: {', '.join(sorted(run.inventory.tools))})")
