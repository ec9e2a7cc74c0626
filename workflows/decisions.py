"""The arguments of a run's human-in-the-loop updates, and the digest that binds a decision to
the call it was made for (pure data: no I/O, no clock).

| update | argument | what it does |
|---|---|---|
| `approve` | `ApprovalDecision` | the call runs with the arguments the model gave |
| `reject` | `ApprovalDecision` | the call is recorded `denied`; the model is told `message`, the tool's rejection message, or `reason` |
| `edit` | `EditDecision` | the call runs with `args` (re-validated against the tool's schema) |
| `respond` | `RespondDecision` | `result` is the call's return; the tool does not run |
| `decide` | `Decisions` | several of the above at once, all or none |
| `set_policy` | `PolicyUpdate` | change the run's approval rules while it runs |
| `tool_result` | `ToolResultInput` | the result of a call of a client tool (`executor="client"`) |

A decision names the call (`call_id`) and may carry the `digest` of the call it saw (the
`state` query and `towline pending` show it): a decision whose digest is not the pending
call's is refused, so a decision made for one call can never approve another that reuses its
id (a later step, another execution after a reset, a re-sent decision).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from towline.capabilities.approval_rules import DECISION_KINDS, DecisionKind

__all__ = [
    "DecisionKind", "Scope", "Verdict", "ApprovalDecision", "EditDecision", "RespondDecision",
    "Decision", "Decisions", "DenyWith", "PolicyUpdate", "ToolResultInput", "call_digest",
    "matches", "DECISION_KINDS", "DECIDED",
]

DECIDED: Final[Mapping[str, str]] = {
    "approve": "approved", "reject": "rejected", "edit": "edited", "respond": "responded",
}
"""How the audit trail and `towline approve --json` name a decision of each `DecisionKind`."""
Scope = Literal["run", "session"]
"""How long a remembered decision lasts: the current turn (`run`: until the run answers the
message it is working on) or the whole workflow (`session`: every later turn too, across
continue-as-new)."""
Verdict = Literal["approve", "deny", "ask"]
"""What a rule says about a call: run it, deny it, or ask a person."""


class ApprovalDecision(BaseModel):
    """The argument of the `approve` and `reject` updates."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    """The tool call waiting for a decision."""
    reason: str | None = None
    """Told to the model on rejection (as "rejected by a reviewer: REASON", unless a rejection
    message is configured or given); recorded either way."""
    message: str | None = None
    """reject only: the exact text the model is told, over the tool's configured rejection
    message (`Ask.rejection_message`, `ToolApproval.rejection_message`); `reason` stays the
    audit trail's."""
    digest: str | None = None
    """The digest of the call the decision was made for (`state` shows it); refused if the
    pending call's differs. Without it the decision is for whichever call has that id now."""
    by: str | None = None
    """Who decided, recorded in the audit trail (beside the update caller's identity)."""
    remember: Scope | None = None
    """Apply the same decision, without asking, to later calls of this tool (that match
    `pattern`) for the rest of the `run` or the `session`."""
    pattern: dict[str, Any] | None = None
    """With `remember`: only calls whose arguments match (each named argument equal, or a
    string matching a `*` glob)."""


class EditDecision(ApprovalDecision):
    """The argument of the `edit` update: approve with other arguments."""

    args: dict[str, Any]
    """The arguments the call runs with instead (validated against the tool's schema)."""


class RespondDecision(ApprovalDecision):
    """The argument of the `respond` update: the reviewer's answer is the call's return."""

    result: Any
    """The return the model sees (validated against the tool's output type when it has one);
    the tool does not run. For a client tool's call it is the tool's result."""


class Decision(BaseModel):
    """One decision of a `Decisions` batch."""

    model_config = ConfigDict(extra="forbid")

    kind: DecisionKind
    """approve, reject, edit or respond."""
    call_id: str
    """The call decided."""
    digest: str | None = None
    """As `ApprovalDecision.digest`."""
    reason: str | None = None
    """As `ApprovalDecision.reason`."""
    message: str | None = None
    """As `ApprovalDecision.message` (reject only)."""
    args: dict[str, Any] | None = None
    """edit: the new arguments."""
    result: Any = None
    """respond: the call's return."""
    remember: Scope | None = None
    """As `ApprovalDecision.remember`."""
    pattern: dict[str, Any] | None = None
    """As `ApprovalDecision.pattern`."""


class Decisions(BaseModel):
    """The argument of the `decide` update: decisions on several pending calls, applied all
    together or (one of them refused) not at all."""

    model_config = ConfigDict(extra="forbid")

    decisions: list[Decision] = Field(min_length=1)
    """One per call."""
    by: str | None = None
    """Who decided (the audit trail)."""


class DenyWith(BaseModel):
    """A rule that denies with the message the model is told: `{"deny": "message"}`."""

    model_config = ConfigDict(extra="forbid")

    deny: str
    """What the model is told."""


class PolicyUpdate(BaseModel):
    """The argument of the `set_policy` update: the run's own rules, over the agent's."""

    model_config = ConfigDict(extra="forbid")

    rules: dict[str, Verdict | DenyWith | None] = Field(default_factory=dict[str, Verdict | DenyWith | None])
    """Per tool: approve, deny, ask, `{"deny": "message"}`, or null (back to the agent's rule)."""
    default: Verdict | None = None
    """For tools no rule names (null: keep the current default)."""
    by: str | None = None
    """Who changed it (the audit trail)."""
    reason: str | None = None
    """Why (the audit trail)."""


class ToolResultInput(BaseModel):
    """The argument of the `tool_result` update: a client tool's result, or the
    error it ended with or a request that the model try again: exactly one of the three."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    """The pending client tool call."""
    result: Any = None
    """Its result (validated against the tool's output type when it declares one)."""
    error: str | None = Field(default=None, min_length=1, exclude_if=lambda v: v is None)
    """The tool failed on the client: the call is `failed`, the model is told this
    (it counts against the tool's `max_retries`, like a tool's `ToolError`)."""
    retry: str | None = Field(default=None, min_length=1, exclude_if=lambda v: v is None)
    """The model should call the tool again, told this (a `retry` return, like a
    tool's `ModelRetry`: it counts against the tool's `max_retries`)."""
    digest: str | None = None
    """As `ApprovalDecision.digest`."""
    by: str | None = None
    """Who answered (the audit trail)."""

    @model_validator(mode="after")
    def _one_answer(self) -> ToolResultInput:
        # `result: null` beside an error or a retry is no result (a full dump writes it)
        other = [n for n in ("error", "retry") if getattr(self, n) is not None]
        given = other + (["result"] if self.result is not None or (
            not other and "result" in self.model_fields_set) else [])
        if len(given) != 1:
            raise ValueError("give exactly one of result, error or retry"
                             + (f" (got {' and '.join(given)})" if given else ""))
        return self

    @property
    def answer(self) -> Literal["result", "error", "retry"]:
        """Which of the three it gives."""
        return "error" if self.error is not None else "retry" if self.retry is not None else "result"


def call_digest(execution: str, call_id: str, tool: str, args: Mapping[str, Any], step: int) -> str:
    """The digest a decision names: of the call's id, tool, arguments and step, and of the
    workflow execution that asked (another execution, e.g. after a reset, asks anew)."""
    text = json.dumps([execution, call_id, tool, dict(args), step], sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _glob(pattern: str, value: str) -> bool:
    """`*` matches any run of characters; everything else matches itself (no other syntax)."""
    pieces = pattern.split("*")
    if len(pieces) == 1:
        return pattern == value
    if not value.startswith(pieces[0]) or not value.endswith(pieces[-1]):
        return False
    at, end = len(pieces[0]), len(value) - len(pieces[-1])
    for piece in pieces[1:-1]:
        found = value.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return at <= end


def matches(pattern: Mapping[str, Any] | None, args: Mapping[str, Any]) -> bool:
    """Whether `args` match an argument pattern (None matches every call)."""
    if not pattern:
        return True
    for name, want in pattern.items():
        if name not in args:
            return False
        got = args[name]
        if isinstance(want, str) and isinstance(got, str) and "*" in want:
            if not _glob(want, got):
                return False
        elif got != want:
            return False
    return True
