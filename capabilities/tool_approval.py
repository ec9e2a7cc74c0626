"""`ToolApproval`: an approval policy for tool calls, and a person deciding what it asks about.

Each call is answered by the first of: the run's own rule for its tool (changed while the
run runs by the `set_policy` update), the agent's rule for it (`rules`, or `tools`, which
ask), `default`. A rule approves, denies (the model is told why) or asks; a rule may be a
pure function of the call's validated arguments that answers one of those. A call that asks
is answered by a decision remembered earlier in the run or session when one covers it, else
it waits durably (no worker needs to stay up) for a person: the updates `approve`, `reject`,
`edit` (approve with other arguments), `respond` (the reviewer's answer is the call's return:
the tool does not run) or `decide` (several at once), or the CLI. All the calls of one
response that ask wait together. While they wait, `TowlineStatus` is `waiting` (for an
approval: the `state` query's `waiting_for`), the current details list them, and the `state`
query shows each under `pending_approvals` with the digest a decision names. No decision
within `timeout` records the call `denied`. Every decision is in the run's audit trail.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from towline.errors import ConfigurationError
from towline.hooks import hook_context
from towline.tools import ToolCall, ToolContext

from ._config import check_names, check_timeout
from .approval_rules import (
    Ask,
    Deny,
    Rule,
    RuleAnswer,
    answer_of,
    check_message,
    live_answer,
    static_rule,
)
from .base import ADDED_OPTION, Capability

__all__ = ["ToolApproval", "Ask", "Deny"]


@dataclass(frozen=True)
class ToolApproval(Capability):
    """An approval policy over the run's tool calls (`before_tool_execute`).

    `ToolApproval(tools=["transfer"])` asks before every `transfer` and lets every other tool
    run, as before policies existed.
    """

    tools: Sequence[str] = ()  # pyright: ignore[reportIncompatibleVariableOverride]
    """Tools whose calls ask a person (the rule `"ask"` for each)."""
    timeout: timedelta | None = None
    """How long a call waits for a decision before it is denied; None waits indefinitely."""
    rules: Mapping[str, Rule] = field(default_factory=dict[str, Rule], metadata={ADDED_OPTION: True})
    """Per tool: "approve", "deny", "ask", `Deny(message)`, `Ask(decisions=..., timeout=...)`,
    or a pure function of the call's validated arguments returning one of those."""
    default: Literal["approve", "deny", "ask"] | Deny | Ask = field(default="approve",
                                                                    metadata={ADDED_OPTION: True})
    """The rule of tools neither `tools` nor `rules` names."""
    rejection_message: str | None = field(default=None, metadata={ADDED_OPTION: True})
    """What the model is told, exactly, when a reviewer rejects a call (None: "rejected by a
    reviewer: REASON"). An `Ask(rejection_message=...)` rule sets it for its tool, and a reject
    decision's `message` for that one call; the most specific wins: the decision's, the
    tool's `Ask`, this. The reviewer's `reason` stays in the audit trail either way."""

    def __post_init__(self) -> None:
        names = check_names("ToolApproval", "tools", self.tools)
        check_timeout("ToolApproval", "timeout", self.timeout, optional=True)
        if not isinstance(self.rules, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("ToolApproval.rules must map tool names to rules")
        rules: dict[str, Rule] = {}
        for name, rule in self.rules.items():
            check_names("ToolApproval", "rules", [name])
            rules[name] = rule if callable(rule) else static_rule(f"ToolApproval.rules[{name!r}]", rule)
        both = sorted(set(names) & set(rules))
        if both:
            raise ConfigurationError(f"ToolApproval: {', '.join(both)} named in both tools and rules")
        default = static_rule("ToolApproval.default", self.default)
        if not names and not rules and default == "approve":
            raise ConfigurationError("ToolApproval: tools must name at least one tool "
                                     "(or give rules, or a default other than 'approve')")
        check_message("ToolApproval", "rejection_message", self.rejection_message)
        object.__setattr__(self, "tools", names)
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "default", default)

    def answer(self, tool: str, args: dict[str, Any], live: Mapping[str, Any]) -> RuleAnswer:
        """What the policy says about a call of `tool` with (validated) `args`."""
        found = self._answer(tool, args, live)
        if found.verdict == "ask" and found.rejection_message is None and self.rejection_message:
            return replace(found, rejection_message=self.rejection_message)
        return found

    def _answer(self, tool: str, args: dict[str, Any], live: Mapping[str, Any]) -> RuleAnswer:
        found = live_answer(live, tool)
        if found is not None:
            return found
        rule = "ask" if tool in self.tools else self.rules.get(tool)
        if rule is None:
            default = live.get("default") or self.default
            answer = answer_of(default, "policy" if live.get("default") else "default",
                               "ToolApproval.default")
            return replace(answer, audited=answer.verdict != "approve")
        if callable(rule) and not isinstance(rule, Deny | Ask):
            return answer_of(_predicate(rule, tool, args), "rule", f"ToolApproval.rules[{tool!r}]")
        return answer_of(rule, "rule", f"ToolApproval.rules[{tool!r}]")

    async def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        """Apply the policy to the call: run it, deny it, or wait for a person's decision."""
        return await hook_context().gate(ctx, call, self)


def _predicate(rule: Callable[[dict[str, Any]], Any], tool: str, args: dict[str, Any]) -> Any:
    """A rule function's answer, run under the determinism guard (it is user code; it may be
    asked while a `set_policy` update runs, outside any hook)."""
    from towline.hooks import HookContext

    return HookContext.call_user_code_sync(f"ToolApproval.rules[{tool!r}]", rule,
                                           copy.deepcopy(args), capability="ToolApproval",
                                           hook=f"rules[{tool!r}]")
