"""Checking and decoding the human-in-the-loop updates' arguments (`approval_updates`): what a
validator refuses, changing nothing, before a decision reaches the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .approvals import overdue, remembered_entry
from .audit_bounds import refusal, remember_refusal
from .decisions import ApprovalDecision, Decision, Decisions, DenyWith, PolicyUpdate
from .results_check import check_result as results_check
from .run import Run
from .run_input import decode_argument

__all__ = ["check_decisions", "decoded", "as_decision"]

_M = TypeVar("_M", bound=BaseModel)

_EXAMPLES: dict[str, str] = {
    "approve": '{"call_id": "call_1"}', "reject": '{"call_id": "call_1", "reason": "no"}',
    "edit": '{"call_id": "call_1", "args": {"amount": 5}}',
    "respond": '{"call_id": "call_1", "result": "yes"}',
    "decide": '{"decisions": [{"kind": "approve", "call_id": "call_1"}]}',
    "tool_result": '{"call_id": "call_1", "result": {"ok": true}}',
    "set_policy": '{"rules": {"pay": "ask"}}',
}


def decoded(model: type[_M], value: Any, update: str, *, accepted: bool = False) -> _M:
    """An update's argument, decoded by the workflow (a wrong shape names the field); its
    validator (not `accepted`) also refuses a text longer than the audit trail records."""
    found = decode_argument(model, value, update, _EXAMPLES[update], accepted=accepted)
    refused = None if accepted else refusal(update, **_texts(found))
    if refused is not None:
        raise ValueError(refused)
    return found


def _texts(arg: BaseModel) -> dict[str, str | None]:
    """The texts of an update's argument that go into the audit trail, by name."""
    texts: dict[str, str | None] = {
        name: getattr(arg, name, None) for name in ("by", "reason", "message", "error", "retry")}
    if isinstance(arg, Decisions):
        for i, d in enumerate(arg.decisions):
            texts |= {f"decisions[{i}].reason": d.reason, f"decisions[{i}].message": d.message}
    if isinstance(arg, PolicyUpdate):
        texts |= {f"rules.{tool} deny message": rule.deny for tool, rule in arg.rules.items()
                  if isinstance(rule, DenyWith)}
    return texts


def as_decision(d: ApprovalDecision, kind: str, **extra: Any) -> Decision:
    """One update's decision as a `Decision` of `kind`."""
    return Decision(kind=kind, call_id=d.call_id, digest=d.digest, reason=d.reason,  # pyright: ignore[reportArgumentType]
                    message=d.message, remember=d.remember, pattern=d.pattern, **extra)



def check_decisions(run: Run | None, resolutions: Mapping[str, Any], decisions: list[Decision],
                    *, check_result: bool = True, by: str | None = None) -> None:
    """Refuse (ValueError, nothing changed) any decision the run cannot take (one for a call
    whose deadline has passed included: it has timed out, see `approvals.overdue`; a `respond`'s
    result is checked against the tool's output type unless `check_result` is False: a
    client's error or retry answer has none)."""
    seen: set[str] = set()
    for d in decisions:
        entry = run.approvals.pending.get(d.call_id) if run is not None else None
        if entry is None:
            raise ValueError(f"no tool call {d.call_id!r} is waiting for a decision")
        if d.call_id in seen:
            raise ValueError(f"tool call {d.call_id!r} is decided twice in one batch")
        seen.add(d.call_id)
        if entry["digest"] in resolutions:
            raise ValueError(f"tool call {d.call_id!r} was already decided")
        if overdue(entry):  # its timeout is due in this very task: the decision is too late
            raise ValueError(f"tool call {d.call_id!r} is no longer waiting for a decision: "
                             f"its deadline passed at {entry['expires_at']}, so it timed out "
                             "(nothing was decided)")
        if d.digest is not None and d.digest != entry["digest"]:
            raise ValueError(f"tool call {d.call_id!r} is not the call you decided: its digest "
                             f"is {entry['digest']}, yours {d.digest} (see `towline pending`)")
        tool = run.inventory.tools.get(entry["tool_name"]) if run is not None else None
        if entry["kind"] == "client":
            if d.kind != "respond":
                raise ValueError(f"tool call {d.call_id!r} is a client tool's: it takes its "
                                 "result (`towline respond`, the tool_result update)")
        elif d.kind not in entry["decisions"]:
            raise ValueError(f"{d.kind} is not allowed for tool {entry['tool_name']!r} "
                             f"(allowed: {', '.join(entry['decisions'])})")
        if d.message is not None and d.kind != "reject":
            raise ValueError(f"a message is what the model is told of a rejection: {d.kind} "
                             f"of {d.call_id!r} takes none (reason is recorded)")
        if d.kind == "edit":
            if d.args is None:
                raise ValueError("edit needs the new arguments (args)")
            if tool is not None:
                try:
                    tool.validate_args(d.args)
                except ValidationError as e:
                    raise ValueError(f"the edited arguments of {d.call_id!r} are invalid: "
                                     f"{_errors(e)}") from None
        if d.kind == "respond" and tool is not None and check_result:
            results_check(tool, d.result, d.call_id)
        if d.pattern is not None:
            if d.remember is None:
                raise ValueError("a pattern is only used with remember (run or session)")
            props: dict[str, Any] = (tool.json_schema.get("properties") or {}) if tool else {}
            unknown = sorted(set(d.pattern) - set(props)) if props else []
            if unknown:
                raise ValueError(f"the pattern names arguments {entry['tool_name']!r} does "
                                 f"not have: {', '.join(unknown)}")
        if d.remember is not None and entry["kind"] != "client":
            refused = remember_refusal(d.call_id, remembered_entry(
                entry, d.kind, d.call_id, scope=d.remember, pattern=d.pattern, reason=d.reason,
                args=d.args if d.kind == "edit" else None, result=d.result, message=d.message,
                by=by))
            if refused is not None:
                raise ValueError(refused)



def _errors(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'args'}: {err['msg']}"
                     for err in e.errors())

