"""`CompletionGate`: check the final answer and send it back with feedback until it passes.

In `after_model`, when the model gives a final answer (text, or the
structured-output call; no function tool calls), the gate checks it — with a
function, or with a reviewer model and a rubric (one `towline.model_request`
activity, its usage returned under `llm_usage`). A failing answer is bounced:
the gate appends a user message with the feedback and jumps back to the
model. After `max_attempts` answers the last one is let through, so a gate
can never loop a run forever (and `max_steps` still applies).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from towline.errors import ConfigurationError
from towline.hooks import hook_context
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    Usage,
    UserPart,
)

from ._config import check_int, check_str
from .base import Capability

__all__ = ["CompletionGate", "Verdict", "parse_verdict"]

CheckResult = bool | str
"""`True`: the answer passes; `False` or a string (the feedback): it fails."""
Check = Callable[[str], CheckResult | Awaitable[CheckResult]]

Verdict = Literal["passed", "retrying", "gave_up"]

REVIEWER_INSTRUCTIONS = (
    "You review an AI assistant's final answer against a rubric. If the answer satisfies "
    "the rubric, reply with PASS on the first line. Otherwise reply with FAIL on the first "
    "line, followed by short, specific feedback the assistant can act on."
)
DEFAULT_FEEDBACK = "The answer did not pass the completion check."
BOUNCE = "Your answer did not pass the completion check"


@dataclass(frozen=True)
class CompletionGate(Capability):
    """Bounces final answers that fail a check back to the model (`after_model`).

    Give either `check` or both `rubric_model` and `rubric`. The gate's progress
    lives in the contributed state key `state_key` (in `RunResult.state` and the
    `state` query): `{"attempts": n, "verdict": "passed" | "retrying" |
    "gave_up", "feedback": str | None}`. `attempts` counts the answers checked
    since the last answer the gate let through: it restarts for the next answer
    (e.g. the next message of a session), so each answer gets `max_attempts`.
    """

    check: Check | None = None
    """`check(text) -> bool | str`, sync or async: `True` passes; `False` or a feedback string
    fails. It runs as workflow code, so it must be deterministic (no I/O, clock or randomness:
    the determinism guard fails the run with `NondeterministicHook` naming
    `CompletionGate.check`); structured output is checked as its JSON text."""
    max_attempts: int = 3
    """Answers the model may give per final answer: after this many failed checks the last
    answer is let through (verdict `gave_up`). 1 checks and records without bouncing."""
    rubric_model: str | None = None
    """Reviewer model name (`"test"` or registered with `TowlinePlugin(models=...)`)."""
    rubric: str | None = None
    """What a good answer must satisfy; the reviewer answers PASS, or FAIL with feedback."""
    state_key: str = "completion_gate"
    """The contributed state key holding the gate's progress (unique per gate in an agent)."""

    def __post_init__(self) -> None:
        by_rubric = self.rubric_model is not None or self.rubric is not None
        if self.check is not None and by_rubric:
            raise ConfigurationError("CompletionGate: give either check or rubric_model+rubric")
        if self.check is None and not (self.rubric_model and self.rubric):
            raise ConfigurationError(
                "CompletionGate: give a check function, or both rubric_model and rubric"
            )
        if self.check is not None and not callable(self.check):
            raise ConfigurationError("CompletionGate: check must be callable")
        check_int("CompletionGate", "max_attempts", self.max_attempts, 1)
        if self.rubric_model is not None or self.rubric is not None:
            check_str("CompletionGate", "rubric_model", self.rubric_model, empty=False)
            check_str("CompletionGate", "rubric", self.rubric, empty=False)
        if not self.state_key or self.state_key in ("messages", "llm_usage", "jump_to"):
            raise ConfigurationError(f"CompletionGate: invalid state_key {self.state_key!r}")
        object.__setattr__(self, "state_schema", {self.state_key: None})

    async def after_model(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """Check a final answer; on failure append feedback and jump back to the model."""
        messages: list[Message] = state["messages"]
        answer = final_answer(messages[-1]) if messages else None
        if answer is None:
            return None
        prior: Any = state.get(self.state_key)
        attempts = 1
        if isinstance(prior, Mapping) and prior.get("verdict") == "retrying":  # pyright: ignore[reportUnknownMemberType]
            attempts = int(prior.get("attempts", 0)) + 1  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        usage = Usage()
        if self.check is not None:
            feedback = _feedback(await hook_context().call_user_code("CompletionGate.check",
                                                                     self.check, answer))
        else:
            feedback, usage = await self._review(messages, answer)
        update: dict[str, Any] = {}
        if usage != Usage():
            update["llm_usage"] = usage
        if feedback is None:
            update[self.state_key] = {"attempts": attempts, "verdict": "passed", "feedback": None}
            return update
        if attempts >= self.max_attempts:
            update[self.state_key] = {"attempts": attempts, "verdict": "gave_up",
                                      "feedback": feedback}
            return update
        update[self.state_key] = {"attempts": attempts, "verdict": "retrying", "feedback": feedback}
        note = (f"{BOUNCE} (attempt {attempts} of {self.max_attempts}). "
                f"Feedback: {feedback}\nRevise your answer.")
        # A bounced structured answer is an output-tool call: the runtime records its
        # `not_executed` return right after it, before this feedback.
        update["messages"] = [ModelRequest(parts=[UserPart(content=note)])]
        update["jump_to"] = "model"
        return update

    async def _review(self, messages: list[Message], answer: str) -> tuple[str | None, Usage]:
        """Ask the reviewer model; returns (feedback or None for a pass, its usage)."""
        assert self.rubric_model is not None and self.rubric is not None
        hook = hook_context()
        step = hook.run.counters.run_step
        prompt = f"Rubric:\n{self.rubric}\n\nTask:\n{_task(messages)}\n\nAnswer:\n{answer}"
        response = await hook.call_model(
            self.rubric_model,
            [ModelRequest(id="completion-gate-instructions",
                          parts=[SystemPart(content=REVIEWER_INSTRUCTIONS)]),
             ModelRequest(id="completion-gate-request", parts=[UserPart(content=prompt)])],
            run_step=step, summary=f"{self.rubric_model} · completion check · step {step}",
        )
        return parse_verdict(response.text), response.usage


def final_answer(message: Message) -> str | None:
    """The final answer in a response: its text, or the structured output's JSON; else None."""
    if not isinstance(message, ModelResponse):
        return None
    calls = message.tool_calls
    if any(c.kind != "output" for c in calls):
        return None
    if calls:
        return json.dumps(calls[0].args, sort_keys=True)
    return message.text or None


def parse_verdict(text: str, *, unclear: str | None = None) -> str | None:
    """A reviewer's reply: None when it passes, else the feedback.

    The first `PASS` or `FAIL` word decides; a reply with neither is `unclear`: by default
    a pass, so an unreadable reviewer never blocks a run (a guardrail, which fails closed,
    gives what to say instead).
    """
    found = re.search(r"\b(PASS|FAIL)(?:ED)?\b", text, re.IGNORECASE)
    if found is None:
        return unclear
    if found.group(1).upper() == "PASS":
        return None
    rest = text[found.end():].strip(" \t\r\n:-—")
    return rest or DEFAULT_FEEDBACK


def _feedback(result: Any) -> str | None:
    if result is True:
        return None
    if isinstance(result, str):
        return result.strip() or DEFAULT_FEEDBACK
    if result is False:
        return DEFAULT_FEEDBACK
    raise TypeError(f"a completion check returns bool or str, not {type(result).__name__}")


def _task(messages: list[Message]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            texts = [p.text for p in m.parts if isinstance(p, UserPart)]
            if texts and not texts[0].startswith(BOUNCE):
                return "\n".join(texts)
    return ""

