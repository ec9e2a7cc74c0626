"""`OutputGuardrail`: check the run's final answer before anyone gets it, and trip if it must not.

A guardrail is a function of what it guards that passes or trips. This one guards the run's
output: in `after_model`, when a response is a final answer (no tool calls; text, or the
structured output), the check reads the output as `RunResult.output` would hold it (the
text, or the validated output's JSON value). A response whose output is not valid is not
checked: the run asks the model again, as it would anyway. A trip ends the run with
`GuardrailTripped` (the guardrail's name and what it said), the partial run kept with the
answer in it, so the caller never receives the output. In a session, every answer is checked,
and with `on_trip="end_turn"` (engine 5) a trip ends only the turn: the stopped answer is left
out of the conversation (the Temporal history keeps the model's response), the `refusal`
stands in its place as the turn's answer, and the session waits for the next message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from towline import Model
from towline.hooks import hook_context
from towline.messages import Message, ModelResponse

from ._guardrail import (
    REFUSAL,
    Check,
    OnTrip,
    PolicyKind,
    check_judge,
    check_on_trip,
    check_policy_kind,
    default_name,
    guard_models,
    tripwire,
    verdict,
)
from .base import ADDED_OPTION, Capability

__all__ = ["OutputGuardrail"]

WHAT = "an AI assistant's final answer to a user"
"""What the guard model is told it reads."""


@dataclass(frozen=True)
class OutputGuardrail(Capability):
    """Trips the run on a final answer that fails a check (`after_model`).

    Give either `check` or both `model` and `policy`. `after_model` hooks run last to first,
    so a guardrail listed after a `CompletionGate` checks an answer before the gate can bounce
    it, and one listed before the gate checks only answers the gate let through.
    """

    check: Check | None = None
    """`check(output) -> bool | str | None`, sync or async: `True` or `None` passes; `False` or a
    string (what the guardrail says) trips. `output` is the text, or the structured output as
    JSON (a pydantic model's fields as a dict). It runs as workflow code, under the
    determinism guard."""
    model: str | Model | None = None
    """A guard model (a name the worker knows, or a `Model`, which workers then register): it
    reads the answer (structured output as JSON text) and the `policy`, and answers PASS, or
    FAIL with a reason (a reply that does not start with either, or is no `{"verdict": ...}`
    JSON, trips too: docs/guardrails.md shows the exact request and reply). The ledger counts
    it (engine 5: in `requests` too, the run's limits checked before it is sent)."""
    policy: str | None = None
    """What the answer must comply with (`policy_kind="allow"`) or what to flag
    (`policy_kind="detect"`), in words for the guard model."""
    policy_kind: PolicyKind = field(default="allow", metadata={ADDED_OPTION: True})
    """How `policy` reads: "allow" (the answer must comply with it) or "detect" (what to flag,
    as OpenAI's guardrail agents are written)."""
    on_trip: OnTrip = field(default="end_run", metadata={ADDED_OPTION: True})
    """What a trip ends: the run (`GuardrailTripped`), or, in a session, only the turn
    ("end_turn", engine 5): the answer is replaced by `refusal` and the session waits for the
    next message. A run that is no session ends `GuardrailTripped` either way."""
    refusal: str = field(default=REFUSAL, metadata={ADDED_OPTION: True})
    """The answer of a turn the guardrail ended (`on_trip="end_turn"`), in place of the one
    it stopped."""
    name: str | None = None
    """How the failure names this guardrail; defaults to the check's or the model's name."""

    def __post_init__(self) -> None:
        check_judge("OutputGuardrail", self.check, self.model, self.policy)
        check_policy_kind("OutputGuardrail", self.policy_kind)
        check_on_trip("OutputGuardrail", self.on_trip, self.refusal)
        object.__setattr__(self, "name", self.name or default_name(self.check, self.model))
        object.__setattr__(self, "hook_models", guard_models(self.model))

    async def after_model(self, state: dict[str, Any]) -> None:
        """Check a final answer; trip the run if it fails."""
        messages: list[Message] = state["messages"]
        last = messages[-1] if messages else None
        if not isinstance(last, ModelResponse):  # a hook after it added one
            return
        hook = hook_context()
        output = hook.final_output(last)
        if output is hook.NO_OUTPUT:
            return
        assert self.name is not None
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        said = await verdict(self.name, self.check, self.model, self.policy, output, text, WHAT,
                             policy_kind=self.policy_kind)
        if isinstance(said, str):
            refusal = self.refusal if self.on_trip == "end_turn" else None
            raise tripwire("output", self.name, said, refusal=refusal, response_id=last.id)
        return
