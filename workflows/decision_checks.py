"""Checking and decoding the human-in-the-loop updates' arguments (`approval_updates`): what a
validator refuses, changing nothing, before a decision reaches the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .decisions import ApprovalDecision, Decision
from .results_check import check_result
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
    """An update's argument, decoded by the workflow (a wrong shape names the field)."""
    return decode_argument(model, value, update, _EXAMPLES[update], accepted=accepted)


def as_decision(d: ApprovalDecision, kind: str, **extra: Any) -> Decision:
    """One update's decision as a `Decision` of `kind`."""
    return Decision(kind=kind, call_id=d.call_id, digest=d.digest, reason=d.reason,  # pyright: ignore[reportArgumentType]
                    remember=d.remember, pattern=d.pattern, **extra)



def check_decisions(run: Run | None, resolutions: Mapping[str, Any], decisions: list[Decision]) -> None:
    """Refuse (ValueError, nothing changed) any decision the run cannot take."""
    seen: set[str] = set()
    for d in decisions:
        entry = run.pending_approvals.get(d.call_id) if run is not None else None
        if entry is None:
            raise ValueError(f"no tool call {d.call_id!r} is waiting for a decision")
        if d.call_id in seen:
            raise ValueError(f"tool call {d.call_id!r} is decided twice in one batch")
        seen.add(d.call_id)
        if entry["digest"] in resolutions:
            raise ValueError(f"tool call {d.call_id!r} was already decided")
        if d.digest is not None and d.digest != entry["digest"]:
            raise ValueError(f"tool call {d.call_id!r} is not the call you decided: its digest "
                             f"is {entry['digest']}, yours {d.digest} (see `towline pending`)")
        tool = run.tools.get(entry["tool_name"]) if run is not None else None
        if entry["kind"] == "client":
            if d.kind != "respond":
                raise ValueError(f"tool call {d.call_id!r} is a client tool's: it takes its "
                                 "result (`towline respond`, the tool_result update)")
        elif d.kind not in entry["decisions"]:
            raise ValueError(f"{d.kind} is not allowed for tool {entry['tool_name']!r} "
                             f"(allowed: {', '.join(entry['decisions'])})")
        if d.kind == "edit":
            if d.args is None:
                raise ValueError("edit needs the new arguments (args)")
            if tool is not None:
                try:
                    tool.validate_args(d.args)
                except ValidationError as e:
                    raise ValueError(f"the edited arguments of {d.call_id!r} are invalid: "
                                     f"{_errors(e)}") from None
        if d.kind == "respond" and tool is not None:
            check_result(tool, d.result, d.call_id)
        if d.pattern is not None:
            if d.remember is None:
                raise ValueError("a pattern is only used with remember (run or session)")
            props: dict[str, Any] = (tool.json_schema.get("properties") or {}) if tool else {}
            unknown = sorted(set(d.pattern) - set(props)) if props else []
            if unknown:
                raise ValueError(f"the pattern names arguments {entry['tool_name']!r} does "
                                 f"not have: {', '.join(unknown)}")



def _errors(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'args'}: {err['msg']}"
                     for err in e.errors())

