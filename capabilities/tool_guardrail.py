"""`ToolGuardrail`: check a tool call before it runs, or its result before the model sees it.

A guardrail is a function of what it guards that passes or flags. This one guards tools,
one side of a call each (`on`):

- `on="call"` (`before_tool_execute`): the check reads the call (its name and validated
  arguments). A flagged call is `denied` (nothing runs; the model is told which guardrail
  denied it and why, and may try something else), or, with `on_flag="trip"`, the run ends.
- `on="result"` (`before_tool_return`): the check reads a succeeded call's return. A flagged
  result is withheld (the return is recorded `denied`, and the model is told why instead of
  seeing the output), or the run ends (`on_flag="trip"`); the check may also return
  `Replace(content)`, and the model sees `content` in the tool's place.

The tool's own outcome is what counts for the run: a withheld result still counts as the
call it was (its effect happened, its state update is applied), and the Temporal history
keeps what the tool returned. A trip ends the run with `GuardrailTripped`, which names the
guardrail and what it said, with the partial run; the call is recorded `denied`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from towline import Model
from towline.errors import ConfigurationError, ToolDenied
from towline.tools import ToolCall, ToolContext, ToolReturn

from ._config import check_names
from ._guardrail import (
    Check,
    PolicyKind,
    Replace,
    check_judge,
    check_policy_kind,
    default_name,
    guard_models,
    report,
    text_of,
    tripwire,
    verdict,
)
from .base import ADDED_OPTION, Capability

__all__ = ["ToolGuardrail", "Replace"]

WHAT = {"call": "a tool call an AI assistant is about to make",
        "result": "what a tool returned to an AI assistant"}
"""What the guard model is told it reads."""


@dataclass(frozen=True)
class ToolGuardrail(Capability):
    """Denies or trips on tool calls, or withholds, replaces or trips on their results.

    Give either `check` or both `model` and `policy`. Hooks compose in list order: a
    `ToolGuardrail` on calls listed before a `ToolApproval` spares the reviewer calls it
    denies; one on results sees what earlier `before_tool_return` hooks left.
    """

    check: Check | None = None
    """`check(value)`, sync or async, where `value` is the `ToolCall` (`on="call"`) or the
    `ToolReturn` (`on="result"`, succeeded calls only): `True` or `None` passes; `False` or a
    string (what the guardrail says) flags it; on results, `Replace(content)` replaces what
    the model sees. It runs as workflow code, under the determinism guard."""
    model: str | Model | None = None
    """A guard model (a name the worker knows, or a `Model`, which workers then register): it
    reads the call (`name(arguments)`) or the result's text and the `policy`, and answers
    PASS, or FAIL with a reason (a reply that does not start with either, or is no
    `{"verdict": ...}` JSON, flags too: docs/guardrails.md shows the exact request and reply).
    The ledger counts it (engine 5: in `requests` too, the run's limits checked before it is
    sent)."""
    policy: str | None = None
    """What a call or result must comply with (`policy_kind="allow"`) or what to flag
    (`policy_kind="detect"`), in words for the guard model."""
    policy_kind: PolicyKind = field(default="allow", metadata={ADDED_OPTION: True})
    """How `policy` reads: "allow" (a call or result must comply with it) or "detect" (what to
    flag, as OpenAI's guardrail agents are written)."""
    on: Literal["call", "result"] = "call"
    """Which side of a tool call it guards: the call before it runs, or its result before the
    model sees it."""
    on_flag: Literal["deny", "trip"] = "deny"
    """What a flag does: deny the call or withhold the result (the model is told why, the run
    goes on), or trip (the run ends with `GuardrailTripped`)."""
    tools: Sequence[str] = ()  # pyright: ignore[reportIncompatibleVariableOverride]
    """Names of the tools it guards; empty guards every tool (MCP tools included)."""
    name: str | None = None
    """How denials and failures name this guardrail; defaults to the check's or the model's
    name."""

    def __post_init__(self) -> None:
        check_judge("ToolGuardrail", self.check, self.model, self.policy)
        check_policy_kind("ToolGuardrail", self.policy_kind)
        if self.on not in ("call", "result"):
            raise ConfigurationError(f"ToolGuardrail.on must be 'call' or 'result', not {self.on!r}")
        if self.on_flag not in ("deny", "trip"):
            raise ConfigurationError(
                f"ToolGuardrail.on_flag must be 'deny' or 'trip', not {self.on_flag!r}")
        object.__setattr__(self, "tools", check_names("ToolGuardrail", "tools", self.tools))
        object.__setattr__(self, "name", self.name or default_name(self.check, self.model))
        object.__setattr__(self, "hook_models", guard_models(self.model))

    def _guards(self, tool_name: str) -> bool:
        return not self.tools or tool_name in self.tools

    async def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        """Check a call of a guarded tool; deny it, or trip the run, when flagged."""
        if self.on != "call" or not self._guards(call.tool_name):
            return call
        assert self.name is not None
        text = f"{call.tool_name}({json.dumps(call.args, ensure_ascii=False, sort_keys=True)})"
        said = await verdict(self.name, self.check, self.model, self.policy, call, text,
                             WHAT["call"], policy_kind=self.policy_kind)
        if said is None:
            return call
        assert isinstance(said, str)
        if self.on_flag == "trip":
            raise tripwire("tool_call", self.name, said, call.tool_call_id)
        report("tool_call", self.name, "denied", said, call_id=call.tool_call_id)
        raise ToolDenied(f"denied by guardrail {self.name!r}: {said}")

    async def before_tool_return(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> ToolReturn:
        """Check a guarded tool's succeeded result; withhold or replace it, or trip the run."""
        if self.on != "result" or result.status != "succeeded" or not self._guards(call.tool_name):
            return result
        assert self.name is not None
        said = await verdict(self.name, self.check, self.model, self.policy, result,
                             text_of(result.content), WHAT["result"], replace=True,
                             policy_kind=self.policy_kind)
        if said is None:
            return result
        if isinstance(said, Replace):
            report("tool_result", self.name, "replaced", said.reason, call_id=call.tool_call_id)
            return result.model_copy(update={"content": said.content})
        if self.on_flag == "trip":
            raise tripwire("tool_result", self.name, said, call.tool_call_id)
        report("tool_result", self.name, "withheld", said, call_id=call.tool_call_id)
        return result.model_copy(update={
            "status": "denied",
            "content": f"the output of {call.tool_name!r} was withheld by guardrail "
                       f"{self.name!r}: {said}"})
