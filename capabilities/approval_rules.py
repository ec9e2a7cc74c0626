"""The rules of `ToolApproval`: what a policy says about one tool call.

A rule is `"approve"`, `"deny"`, `"ask"`, a `Deny(message)`, an `Ask(...)` with its own
options, or a function of the call's validated arguments returning one of those. A function
is hook code: it runs in the workflow under the determinism guard, so it must be pure (no
clock, randomness, environment or I/O; a function that reads them fails the run with
`NondeterministicHook`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Literal, cast, get_args

from towline.errors import ConfigurationError

from ._config import check_timeout
from .base import ADDED_OPTION

__all__ = ["Deny", "Ask", "Rule", "RuleAnswer", "static_rule", "check_message", "DecisionKind",
           "DECISION_KINDS"]

DecisionKind = Literal["approve", "reject", "edit", "respond"]
"""What a reviewer may decide about a call waiting for approval: the one definition, which
the workflow's decisions, `towline.review`, the CLI and `serve` take."""
DECISION_KINDS: Final[tuple[DecisionKind, ...]] = get_args(DecisionKind)
"""What a reviewer may decide (all of them unless an `Ask` narrows it), in `DecisionKind`'s order."""


@dataclass(frozen=True)
class Deny:
    """Deny the call without asking; the model is told `message`."""

    message: str = "denied by the run's approval policy"
    """What the model is told (recorded as the call's `denied` return)."""


@dataclass(frozen=True)
class Ask:
    """Ask a person, with options of its own."""

    decisions: Sequence[str] = DECISION_KINDS
    """What the reviewer may decide: approve, reject, edit, respond (any of them)."""
    timeout: timedelta | None = None
    """How long to wait for this tool's calls; None takes `ToolApproval.timeout`."""
    metadata: Mapping[str, Any] | None = field(default=None, metadata={ADDED_OPTION: True})
    """JSON attached to the approval request, for the reviewer: shown with the pending call
    (`state` query, `towline pending`, the `approval` event, an AG-UI interrupt). A rule
    function returning `Ask(metadata=...)` attaches what it read from the arguments."""
    rejection_message: str | None = field(default=None, metadata={ADDED_OPTION: True})
    """What the model is told when a reviewer rejects a call of this tool, exactly (None:
    `ToolApproval.rejection_message`); a rejection's own `message` wins over it."""

    def __post_init__(self) -> None:
        kinds = tuple(self.decisions)
        unknown = [k for k in kinds if k not in DECISION_KINDS]
        if unknown or not kinds:
            raise ConfigurationError(f"Ask: decisions must be some of {', '.join(DECISION_KINDS)} "
                                     f"(got {list(kinds)!r})")
        check_timeout("Ask", "timeout", self.timeout, optional=True)
        object.__setattr__(self, "decisions", kinds)
        check_message("Ask", "rejection_message", self.rejection_message)
        if self.metadata is not None:
            if not isinstance(self.metadata, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError("Ask.metadata must be a mapping of JSON values")
            try:  # what the run records and shows: JSON only, checked where it is made
                copied = json.loads(json.dumps(dict(self.metadata)))
            except (TypeError, ValueError) as e:
                raise ConfigurationError(f"Ask.metadata must be JSON: {e}") from None
            object.__setattr__(self, "metadata", copied)


Static = Literal["approve", "deny", "ask"] | Deny | Ask
Rule = str | Deny | Ask | Callable[[dict[str, Any]], str | Deny | Ask]
"""A tool's rule: a verdict ("approve", "deny", "ask"; checked when the capability is built),
`Deny`, `Ask`, or a pure function of the validated arguments returning one of those."""


@dataclass(frozen=True)
class RuleAnswer:
    """What the policy answered for one call."""

    verdict: Literal["approve", "deny", "ask"]
    message: str | None = None
    """deny: what the model is told."""
    decisions: tuple[str, ...] = DECISION_KINDS
    """ask: what may be decided."""
    timeout: timedelta | None = None
    """ask: this tool's own timeout, if its `Ask` sets one."""
    source: str = "rule"
    """rule (the agent's), policy (the run's, set by `set_policy`), default."""
    audited: bool = True
    """Whether the answer is worth an audit entry (a tool no rule names, approved by the
    default, is not)."""
    metadata: Mapping[str, Any] | None = None
    """ask: what the `Ask` attaches to the approval request."""
    rejection_message: str | None = None
    """ask: what the model is told of a rejection (None: the default text)."""


def check_message(owner: str, name: str, value: Any) -> None:
    """A rejection message is a non-empty string (or None)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigurationError(f"{owner}.{name} must be a non-empty string, not {value!r}")


def static_rule(owner: str, value: Any) -> Static:
    """A rule value checked at definition time (a string must be a verdict)."""
    if isinstance(value, Deny | Ask):
        return value
    if value in ("approve", "deny", "ask"):
        return cast(Static, value)
    raise ConfigurationError(f"{owner}: a rule is 'approve', 'deny', 'ask', Deny(...), Ask(...) "
                             f"or a function of the arguments, not {value!r}")


def answer_of(value: Any, source: str, where: str) -> RuleAnswer:
    """The answer a static rule (or a function's result) gives."""
    rule = static_rule(where, value)
    if isinstance(rule, Deny):
        return RuleAnswer("deny", message=rule.message, source=source)
    if isinstance(rule, Ask):
        return RuleAnswer("ask", decisions=tuple(rule.decisions), timeout=rule.timeout, source=source,
                          metadata=rule.metadata, rejection_message=rule.rejection_message)
    if rule == "deny":
        return RuleAnswer("deny", message=Deny().message, source=source)
    return RuleAnswer(rule, source=source)


def live_answer(live: Mapping[str, Any], tool: str) -> RuleAnswer | None:
    """The run's own rule for `tool` (`PolicyUpdate`, as the run holds it), if it has one."""
    rules: Mapping[str, Any] = live.get("rules") or {}
    value = rules.get(tool)
    if value is None:
        return None
    if isinstance(value, Mapping):
        return RuleAnswer("deny", message=str(cast(Mapping[str, Any], value)["deny"]), source="policy")
    return answer_of(value, "policy", "set_policy")
