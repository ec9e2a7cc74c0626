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
partial run kept. What the model sees is unchanged: the guardrail reads, it never edits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from towline.errors import ConfigurationError
from towline.messages import ModelResponse
from towline.runtime.model_types import Model

from ._guardrail import (
    Check,
    check_judge,
    default_name,
    engine_ready,
    guard_models,
    tripwire,
    user_input,
    verdict,
)
from .base import Capability, NextModelCall
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
    reads the input and the `policy`, and answers PASS, or FAIL with a reason (an answer with
    neither trips too). One `towline.model_request` activity; the ledger counts its usage."""
    policy: str | None = None
    """What the input must comply with, in words for the guard model."""
    name: str | None = None
    """How the failure names this guardrail; defaults to the check's or the model's name."""
    run_in_parallel: bool = True
    """Run the check alongside the model request (True) or before it (False: a trip costs no
    model call, a pass costs the check's latency)."""

    def __post_init__(self) -> None:
        check_judge("InputGuardrail", self.check, self.model, self.policy)
        if not isinstance(self.run_in_parallel, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("InputGuardrail.run_in_parallel must be True or False")
        object.__setattr__(self, "name", self.name or default_name(self.check, self.model))
        object.__setattr__(self, "hook_models", guard_models(self.model))

    async def wrap_model_call(self, request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        """Check new user input: before the model request, or alongside it (cancelling it on a trip)."""
        text = user_input(request.messages)
        if text is None or not engine_ready():  # nothing new from the user since the model answered
            return await next(request)
        if not self.run_in_parallel:
            await self._judge(text)
            return await next(request)
        from towline.workflows.model_schedule import wait_cancellation_completed

        async def model() -> ModelResponse:
            wait_cancellation_completed()  # in this task only: its model calls wait on a cancel
            return await next(request)

        task = asyncio.ensure_future(model())
        try:
            await self._judge(text)
        except BaseException:
            await _cancelled(task)  # the trip (or any failure) wins; the request's usage counts
            raise
        return await task

    async def _judge(self, text: str) -> None:
        assert self.name is not None
        said = await verdict(self.name, self.check, self.model, self.policy, text, text, WHAT)
        if isinstance(said, str):
            raise tripwire("input", self.name, said)


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
