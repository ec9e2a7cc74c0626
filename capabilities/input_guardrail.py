"""`InputGuardrail`: check what the user says before the run acts on it, and trip if it must not.

A guardrail is a function of what it guards that passes or trips. This one guards the
run's input: the user's text since the model last answered (the prompt at the first
request, each message `send` brings in a session). It runs in `wrap_model_call`, around
the model request that input would start:

- `run_in_parallel=True` (the default, as in the OpenAI Agents SDK): the model request and
  the check start together, so a passing check costs no latency. When the check trips, the
  in-flight request is cancelled through Temporal's activity cancellation, and the run waits
  for its worker to answer the cancellation: a response that was already complete still
  comes back, and its usage is counted. Either way the response is never used: nothing it
  asks for runs, and the model never sees its own answer.
- `run_in_parallel=False`: the check runs first, and a trip means the model is never called.

A trip ends the run with `GuardrailTripped`, which names the guardrail and what it said, the
partial run kept; in a session, `on_trip="end_turn"` (engine 5) ends only the turn: its
answer is the `refusal`, recorded after the user's message, and the session waits for the
next one. What the model sees is unchanged: the guardrail reads, it never edits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from towline import Model
from towline.errors import ConfigurationError
from towline.hooks import hook_context
from towline.messages import ModelResponse

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
    user_input,
    verdict,
)
from .base import ADDED_OPTION, Capability, NextModelCall
from .state import ModelCallRequest

__all__ = ["InputGuardrail"]

WHAT = "a message a user sent to an AI assistant"
"""What the guard model is told it reads."""


@dataclass(frozen=True)
class InputGuardrail(Capability):
    """Trips the run on user input that fails a check (`wrap_model_call`).

    Give either `check` or both `model` and `policy`. Place it where its position in the
    `wrap_model_call` chain should be: first in the list, it is outermost and sees the request
    as every other capability left it, and it cancels every model call the wrappers inside it
    make.
    """

    check: Check | None = None
    """`check(text) -> bool | str | None`, sync or async: `True` or `None` passes; `False` or a
    string (what the guardrail says) trips. It runs as workflow code, under the determinism
    guard (no I/O, clock or randomness: use `model` for a check that needs a model)."""
    model: str | Model | None = None
    """A guard model (a name the worker knows, or a `Model`, which workers then register): it
    reads the input and the `policy`, and answers PASS, or FAIL with a reason (a reply that
    does not start with either, or is no `{"verdict": ...}` JSON, trips too: docs/guardrails.md
    shows the exact request and reply). One `towline.model_request` activity; the ledger
    counts it (engine 5: in `requests` too, the run's limits checked before it is sent)."""
    policy: str | None = None
    """What the input must comply with (`policy_kind="allow"`) or what to flag
    (`policy_kind="detect"`), in words for the guard model."""
    policy_kind: PolicyKind = field(default="allow", metadata={ADDED_OPTION: True})
    """How `policy` reads: "allow" (the input must comply with it: "Only questions about
    orders.") or "detect" (what to flag, as OpenAI's guardrail agents are written: "The user
    asks for help with their maths homework.")."""
    on_trip: OnTrip = field(default="end_run", metadata={ADDED_OPTION: True})
    """What a trip ends: the run (`GuardrailTripped`), or, in a session, only the turn
    ("end_turn", engine 5): its answer is `refusal` and the session waits for the next
    message. A run that is no session ends `GuardrailTripped` either way."""
    refusal: str = field(default=REFUSAL, metadata={ADDED_OPTION: True})
    """The answer of a turn the guardrail ended (`on_trip="end_turn"`), as the user and the
    model see it in the conversation; what the guardrail said stays in its live event."""
    name: str | None = None
    """How the failure names this guardrail; defaults to the check's or the model's name."""
    run_in_parallel: bool = True
    """Run the check alongside the model request (True) or before it (False: a trip costs no
    model call, a pass costs the check's latency)."""

    def __post_init__(self) -> None:
        check_judge("InputGuardrail", self.check, self.model, self.policy)
        check_policy_kind("InputGuardrail", self.policy_kind)
        check_on_trip("InputGuardrail", self.on_trip, self.refusal)
        if not isinstance(self.run_in_parallel, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("InputGuardrail.run_in_parallel must be True or False")
        object.__setattr__(self, "name", self.name or default_name(self.check, self.model))
        object.__setattr__(self, "hook_models", guard_models(self.model))

    async def wrap_model_call(self, request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        """Check new user input: before the model request, or alongside it (cancelling it on a trip)."""
        text = user_input(request.messages)
        if text is None:  # nothing new from the user since the model answered
            return await next(request)
        if not self.run_in_parallel:
            await self._judge(text, alongside=0)
            return await next(request)
        hook = hook_context()

        async def model() -> ModelResponse:
            hook.wait_cancellation_completed()  # in this task only: its model calls wait on a cancel
            return await next(request)

        task = asyncio.ensure_future(model())
        try:
            await self._judge(text, alongside=1)
        except BaseException:
            await _cancelled(task)  # the trip (or any failure) wins; the request's usage counts
            raise
        return await task

    async def _judge(self, text: str, *, alongside: int) -> None:
        """Trip on `text` if it fails (`alongside`: the model request running beside it)."""
        assert self.name is not None
        said = await verdict(self.name, self.check, self.model, self.policy, text, text, WHAT,
                             policy_kind=self.policy_kind, alongside=alongside)
        if isinstance(said, str):
            refusal = self.refusal if self.on_trip == "end_turn" else None
            raise tripwire("input", self.name, said, refusal=refusal)


async def _cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel the model request and wait for its outcome (a complete response still counts)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # the run itself was cancelled while it waited
    except Exception:  # noqa: BLE001, S110 - its failure (Cancelled, say) is not the run's reason
        pass
