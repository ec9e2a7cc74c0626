"""Model responses a provider has not finished, completed as more requests of the same call.

Engine 4 (`at_least(4)`, checked by the caller): a response with `suspended` set is not the
call's answer yet.

- `pause_turn` (Anthropic): a long turn of server tools was paused. As the API documents,
  the turn is sent back as it came, as the last (assistant) message, and the model goes on
  with it; the pieces are joined into one response (parts in order, usage summed), and
  each continuation is one more model request of the step (`ModelCall.requests`), counted
  as each piece is done (so the next request's ledger header holds it) and limited like any
  other (`max_requests`, the run's spending limits, and `MAX_CONTINUATIONS` in a row).
- `background` (OpenAI Responses, `ModelSettings.background`): the request only started
  the response. The run waits on a durable timer (the first `poll_interval`, each later
  wait doubling up to `poll_max_interval`), then one short `towline.model_poll` activity
  asks how the response is doing; no worker holds a connection or an activity slot in
  between, so a worker restart loses nothing. A run cancelled meanwhile (Temporal's
  cancel, or towline's `cancel` signal) cancels the response with `towline.model_cancel`
  before it ends `Cancelled`. Engine 5 bounds the wait: a response still unfinished after
  `Agent.model_background_timeout` (the last wait is cut to end there) or after
  `MAX_BACKGROUND_POLLS` polls is cancelled the same way, and the run fails
  `BackgroundTimeout` with the partial run; before it, a response that never finished was
  polled until Temporal's history limit terminated the run, untyped, days later.

  The run does not continue-as-new while it polls: the call is inside a turn (its
  `before_model` hooks' uncommitted changes, the `wrap_model_call` wrappers awaiting the
  response), which a new execution could not take up exactly. The two bounds keep the
  polls' history small instead: at most `MAX_BACKGROUND_POLLS` polls of about 11 events
  each, and 6 hours at the default intervals is under 200.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import NoReturn

from temporalio import workflow

from towline.activities.io import MODEL_CANCEL_ACTIVITY, MODEL_POLL_ACTIVITY, BackgroundInput
from towline.errors import (
    BackgroundTimeout,
    Cancelled,
    ModelRequestFailed,
    RunFailure,
    UsageLimitExceeded,
    runtime_failure,
)
from towline.messages import Message, ModelResponse, Suspended, Usage

from .model_schedule import CallPlan, ModelCall, schedule_model_activity, validated
from .versions import at_least

__all__ = ["complete", "joined", "poll_waits", "MAX_CONTINUATIONS", "POLL_TIMEOUT",
           "MAX_BACKGROUND_POLLS"]

MAX_CONTINUATIONS = 25
"""A paused turn continued this many times without finishing fails the call
(`ModelRequestFailed`): a model that never ends its turn would otherwise spend forever."""

POLL_TIMEOUT = timedelta(seconds=60)
"""Start-to-close timeout of one poll or cancel (a short GET or POST)."""


MAX_BACKGROUND_POLLS = 2000
"""Polls of one background call at most (engine 5), whatever the intervals: about 22,000
history events, well under Temporal's 51,200-event limit with the run's own."""


def joined(pieces: list[ModelResponse]) -> ModelResponse:
    """The pieces of a paused turn as one response: the first's id, every part in order, the
    usage summed, the last one's finish reason and state. One piece is itself, unchanged."""
    if len(pieces) == 1:
        return pieces[0]
    first, last = pieces[0], pieces[-1]
    usage = sum((p.usage for p in pieces), Usage())
    return first.model_copy(update={
        "parts": [part for piece in pieces for part in piece.parts], "usage": usage,
        "finish_reason": last.finish_reason, "model_name": last.model_name or first.model_name,
        "suspended": last.suspended,
    })


def poll_waits(first: timedelta, longest: timedelta) -> Callable[[int], timedelta]:
    """The wait before poll `n` (from 0): `first`, doubling, at most `longest`."""

    def wait(n: int) -> timedelta:
        return min(first * (2 ** min(n, 40)), longest)

    return wait


async def complete(plan: CallPlan, messages: list[Message], first: ModelResponse,
                   send: Callable[[list[Message]], Awaitable[ModelResponse]],
                   answered: Callable[[ModelResponse], None] | None = None) -> ModelCall:
    """Finish a suspended call (see the module's docstring); `send` makes one more request.

    `answered` is told of each piece of a paused turn as it is done, before the request that
    continues it is sent (the run counts it then, so that request's ledger header holds it, and
    may refuse to go on: a spending limit); the last piece is left to the caller
    (`ModelCall.unreported`). Without `answered` (a hook's call) the joined response's usage
    is the whole call's."""
    pieces = [first]
    requests, polls = 1, 0
    wait = poll_waits(plan.poll_interval, plan.poll_max_interval)
    response = first
    started, bounded = workflow.now(), at_least(5)
    while response.suspended is not None:
        suspended = response.suspended
        if suspended.reason == "background":
            delay = wait(polls)
            if bounded:
                left = _time_left(plan, started, polls)
                if left is None:
                    await _give_up(plan, suspended, polls)
                delay = min(delay, left)  # the last poll comes as the time is up
            response = await _poll(plan, suspended, delay, polls + 1)
            polls += 1
            continue
        if len(pieces) > MAX_CONTINUATIONS:
            raise runtime_failure(ModelRequestFailed(
                f"model {plan.model!r} paused its turn {len(pieces)} times in a row (at most "
                f"{MAX_CONTINUATIONS} continuations)"))
        if answered is not None:
            answered(response)
        if plan.max_requests is not None and requests >= plan.max_requests:
            raise runtime_failure(UsageLimitExceeded(
                f"request_limit reached while continuing a paused turn of {plan.model!r}"))
        response = await send([*messages, joined(pieces)])  # the turn as it came, last
        requests += 1
        pieces.append(response)
    if polls:  # a background call: the finished response, under the id it started with
        final = response.model_copy(update={"id": first.id or response.id})
        return ModelCall(final, requests, final.usage)
    whole = joined(pieces)
    return ModelCall(whole, requests, pieces[-1].usage if answered is not None else whole.usage)


def _time_left(plan: CallPlan, started: datetime, polls: int) -> timedelta | None:
    """How long a background call may still wait before its next poll; None when it is out
    of time (`plan.background_timeout`, judged by workflow time) or of polls."""
    if polls >= MAX_BACKGROUND_POLLS:
        return None
    left = plan.background_timeout - (workflow.now() - started)
    return left if left > timedelta(0) else None


async def _give_up(plan: CallPlan, suspended: Suspended, polls: int) -> NoReturn:
    """Cancel a background response that ran out of time, and fail the run `BackgroundTimeout`."""
    where = f"{plan.model} · step {plan.run_step}"
    await _cancel(plan, _background_input(plan, suspended), where)
    bound = (f"{MAX_BACKGROUND_POLLS} polls" if polls >= MAX_BACKGROUND_POLLS
             else f"{plan.background_timeout} (model_background_timeout)")
    raise runtime_failure(BackgroundTimeout(
        f"model {plan.model!r} did not finish its background response "
        f"{suspended.response_id!r} within {bound}, after {polls} polls: it was cancelled",
        response_id=suspended.response_id, polls=polls))


def _background_input(plan: CallPlan, suspended: Suspended) -> BackgroundInput:
    """The poll's or cancel's input: the background response, by id."""
    if not suspended.response_id:
        raise runtime_failure(ModelRequestFailed(
            f"model {plan.model!r} started a background response without an id"))
    return BackgroundInput(model=plan.model, response_id=suspended.response_id,
                           run_step=plan.run_step, agent=plan.agent, output_tools=plan.output_tools)


def _cancel_requested() -> bool:
    """Whether towline's `cancel` signal reached the run."""
    return bool(getattr(workflow.instance(), "_cancelled", False))


async def _poll(plan: CallPlan, suspended: Suspended, wait: timedelta, n: int) -> ModelResponse:
    """Wait `wait` (a durable timer), then ask once how the background response is doing."""
    inp = _background_input(plan, suspended)
    where = f"{plan.model} · step {plan.run_step}"
    try:
        try:
            await workflow.wait_condition(_cancel_requested, timeout=wait,
                                          timeout_summary=f"{where} · background, poll {n}")
        except TimeoutError:
            pass
        else:
            raise runtime_failure(Cancelled("the run was cancelled while its model worked in "
                                            "the background"))
        raw = await schedule_model_activity(plan, MODEL_POLL_ACTIVITY, inp, f"{where} · poll {n}",
                                            timeout=POLL_TIMEOUT)
        return validated(plan.model, raw)
    except (asyncio.CancelledError, Cancelled):
        await _cancel(plan, inp, where)
        raise


async def _cancel(plan: CallPlan, inp: BackgroundInput, where: str) -> None:
    """Cancel the background response (best effort: the run ends `Cancelled` either way)."""
    try:
        await schedule_model_activity(plan, MODEL_CANCEL_ACTIVITY, inp, f"{where} · cancel",
                                      timeout=POLL_TIMEOUT)
    except RunFailure as e:
        workflow.logger.warning("could not cancel background response %s: %s",
                                inp.response_id, e.message)
