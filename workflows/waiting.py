"""A run's approvals (`Approvals`, the part of `Run` that waits for a person, a client or a
message) and what a waiting run shows: its memo keys and the lines of its current details."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DECISIONS_MEMO", "WAITING_MEMO", "Approvals", "ApprovalState", "trail_memo", "pending_lines"]

DECISIONS_MEMO = "towline.decisions"
"""Memo key of the audit trail (`{"total": n, "entries": [newest...]}`)."""
WAITING_MEMO = "towline.waiting"
"""Memo key of what a waiting run waits for (approval, tool_result, message)."""


@dataclass
class ApprovalState:
    """A run's approvals that outlive one call (`Approvals.hitl`, carried across continue-as-new)."""

    policy: dict[str, Any] = field(default_factory=dict[str, Any])
    """The run's own rules (`set_policy`): `{"rules": {...}, "default": ...}`."""
    remembered: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    """Decisions remembered for the run or the session (`approvals.remembered_for`)."""
    audit: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    """The newest entries of the audit trail (`approvals.audit`)."""
    total: int = 0
    """Audit entries ever recorded."""
    seq: int = 0
    """The index of the last call made pending (the short form a person types)."""
    recorded: tuple[int, str | None] = (0, None)
    """The audit total and waiting reason the memo last recorded."""


@dataclass
class Approvals:
    """The run's calls waiting for a decision (or a client's result), its approval policy,
    remembered decisions and audit trail, and what a waiting run waits for (`Run.approvals`;
    `workflows.approvals` works on it)."""

    pending: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    """By call id, what a reviewer needs of a call waiting for a decision or a client's result
    (`approvals.register`); the `state` query shows it."""
    hitl: ApprovalState = field(default_factory=lambda: ApprovalState())
    """The run's approval policy, remembered decisions and audit trail."""
    waiting_for: str | None = None
    """What a waiting run waits for: approval, tool_result (a client tool's) or
    message (a session's next); memo `towline.waiting` while it waits."""


def trail_memo(hitl: ApprovalState, waiting: str | None
               ) -> tuple[dict[str, Any], tuple[int, str | None]]:
    """The memo keys to write for the audit trail and the waiting reason, when they changed
    since `hitl.recorded` (the total and reason last written), and what is recorded after."""
    total, entries, recorded = hitl.total, hitl.audit, hitl.recorded
    memo: dict[str, Any] = {}
    if total != recorded[0]:
        memo[DECISIONS_MEMO] = {"total": total, "entries": entries}
    if waiting != recorded[1]:
        memo[WAITING_MEMO] = waiting  # None removes the key
    return memo, (total, waiting)


def pending_lines(pending: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The current details' lines of the calls that wait, by index."""
    lines: list[str] = []
    for call_id, p in sorted(pending.items(), key=lambda kv: kv[1].get("index") or 0):
        what = "a client's result" if p.get("kind") == "client" else "approval"
        lines.append(f"- waiting for {what}: #{p.get('index')} `{p.get('tool_name')}` call {call_id}")
    return lines
