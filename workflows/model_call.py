"""The model call, durable, from workflow code: the run's own, and hooks' (summarisers,
critics). One call is one or more model activities, scheduled here, and completed here when its
provider has not finished it.

`call_model` schedules the `towline.model_request` activity. A hook that calls a
model reports the usage under `llm_usage` itself; the run's own calls are
counted by the runtime (`request_model` tells it how many requests one call made). The run's
own calls and `HookContext.call_model` hand over the run's state (`Run`: its request book,
dispatch, payload limit and steering); `call_model` from hook code finds it in the run's scope
(`workflows.scope`), and outside an `AgentRun` sends its request inline.

Scheduling. The model request, a background response's poll and its cancel are scheduled the
one way `schedule_model_activity` does it (the model's task queue, the run's priority,
Temporal's retries), and their failures become the run's (`ModelRequestFailed`,
`ContextLengthExceeded`, `PayloadTooLarge`, `Cancelled`).

Responses a provider has not finished. A response with `suspended` set
(`ModelResponse.suspended`) is not the call's answer yet; it is completed as more requests of
the same call (`complete`), and the caller gets the finished response.

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
  before it ends `Cancelled`. The wait is bounded: a response still unfinished after
  `Agent.model_background_timeout` (the last wait is cut to end there) or after
  `MAX_BACKGROUND_POLLS` polls is cancelled the same way, and the run fails
  `BackgroundTimeout` with the partial run (unbounded, a response that never finished would
  be polled until Temporal's history limit terminated the run, untyped, days later).

  The run does not continue-as-new while it polls: the call is inside a turn (its
  `before_model` hooks' uncommitted changes, the `wrap_model_call` wrappers awaiting the
  response), which a new execution could not take up exactly. The two bounds keep the
  polls' history small instead: at most `MAX_BACKGROUND_POLLS` polls of about 11 events
  each, and 6 hours at the default intervals is under 200.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

from towline.activities.io import (
    MODEL_ACTIVITY,
    MODEL_CANCEL_ACTIVITY,
    MODEL_POLL_ACTIVITY,
    BackgroundInput,
    ModelActivityInput,
)
from towline.activities.model_errors import CONTEXT_LENGTH
from towline.errors import (
    BackgroundTimeout,
    Cancelled,
    ContextLengthExceeded,
    ModelRequestFailed,
    PayloadTooLarge,
    RunFailure,
    UsageLimitExceeded,
    runtime_failure,
)
from towline.fleet.routing import Dispatch
from towline.messages import Message, ModelResponse, Suspended, Usage
from towline.native_tools import NATIVE_TOOLS, NativeTool
from towline.options import (
    BACKGROUND_TIMEOUT,
    MODEL_HEARTBEAT_TIMEOUT,
    MODEL_POLL_INTERVAL,
    MODEL_POLL_MAX_INTERVAL,
    MODEL_TIMEOUT,
    ModelSettings,
    OutputMode,
    model_retry_policy,
)
from towline.runtime.payloads import PAYLOAD_LIMIT
from towline.runtime.request_chain import RequestDefinitions
from towline.tools import ToolDefinition

from . import scope
from .run import Run, oversize

__all__ = ["call_model", "request_model", "DEFAULT_HEARTBEAT_TIMEOUT", "ModelCall", "CallPlan",
           "schedule_model_activity", "validated", "wait_cancellation_completed", "complete",
           "joined", "poll_waits", "MAX_CONTINUATIONS", "POLL_TIMEOUT", "MAX_BACKGROUND_POLLS"]

DEFAULT_HEARTBEAT_TIMEOUT = MODEL_HEARTBEAT_TIMEOUT
"""How long a model activity may go without a heartbeat before Temporal retries it
(`towline.options.MODEL_HEARTBEAT_TIMEOUT`, under its older name)."""

MAX_CONTINUATIONS = 25
"""A paused turn continued this many times without finishing fails the call
(`ModelRequestFailed`): a model that never ends its turn would otherwise spend forever."""

POLL_TIMEOUT = timedelta(seconds=60)
"""Start-to-close timeout of one poll or cancel (a short GET or POST)."""

MAX_BACKGROUND_POLLS = 2000
"""Polls of one background call at most, whatever the intervals: about 22,000
history events, well under Temporal's 51,200-event limit with the run's own."""

_WAIT_ON_CANCEL: ContextVar[bool] = ContextVar("towline_wait_on_cancel", default=False)
"""Set in a task whose model activities, once cancelled, wait for the worker's answer."""

_TOO_LARGE = ("PayloadTooLarge", "PayloadsTooLarge")
"""Activity failure types of a response over the payload limit: the model activity's
own check, and the SDK's (`PayloadsTooLarge`) should a response slip past it."""

_NO_DISPATCH = Dispatch()
"""Where a call outside an `AgentRun` goes: its workflow's task queue, Temporal's default
priority."""


@dataclass(frozen=True)
class CallPlan:
    """What every activity of one model call shares."""

    model: str
    run_step: int
    agent: str
    summary: str
    """The model request's activity summary (`"<model> · step <n>"`)."""
    output_tools: list[str]
    """The names of the output tools offered."""
    timeout: timedelta
    retry_policy: RetryPolicy
    heartbeat_timeout: timedelta | None
    poll_interval: timedelta
    """A background call: the first wait before polling (each later one doubles)."""
    poll_max_interval: timedelta
    """A background call: the longest wait between two polls."""
    max_requests: int | None = None
    """At most this many model requests (a paused turn's continuations count), None: any."""
    background_timeout: timedelta = BACKGROUND_TIMEOUT
    """A background call: how long it may go unfinished before it is cancelled and the run
    fails `BackgroundTimeout` (`MAX_BACKGROUND_POLLS` bounds it too)."""
    run: Run | None = None
    """The run's state the call is made for (its request book, dispatch, payload limit and
    steering); None outside an `AgentRun`."""

    @property
    def dispatch(self) -> Dispatch:
        """The run's model routes and priority (the default outside a run)."""
        return self.run.dispatch if self.run is not None else _NO_DISPATCH

    @property
    def payload_limit(self) -> int:
        """The run's payload limit (`PAYLOAD_LIMIT` outside a run)."""
        return self.run.payload_limit if self.run is not None else PAYLOAD_LIMIT


@dataclass(frozen=True)
class ModelCall:
    """A finished model call: the response, and the model requests it took."""

    response: ModelResponse
    requests: int
    unreported: Usage
    """The usage the caller has not been told of (`answered`): the last request's (a paused
    turn's earlier pieces were counted as they came), or the whole call's."""


async def call_model(
    model: str,
    messages: list[Message],
    *,
    tools: list[ToolDefinition] | None = None,
    output_tools: list[ToolDefinition] | None = None,
    output_mode: OutputMode = "tool",
    output_schema: dict[str, Any] | None = None,
    settings: ModelSettings | None = None,
    native_tools: list[NativeTool] | None = None,
    run_step: int = 0,
    agent: str = "",
    summary: str | None = None,
    timeout: timedelta = MODEL_TIMEOUT,
    retry_policy: RetryPolicy | None = None,
    heartbeat_timeout: timedelta | None = DEFAULT_HEARTBEAT_TIMEOUT,
    poll_interval: timedelta = MODEL_POLL_INTERVAL,
    poll_max_interval: timedelta = MODEL_POLL_MAX_INTERVAL,
    background_timeout: timedelta = BACKGROUND_TIMEOUT,
) -> ModelResponse:
    """Call `model` durably (one activity). Raises `ModelRequestFailed` if it fails for good
    (`ContextLengthExceeded` when the request does not fit the model's context window).

    The activity heartbeats while it waits for the provider, so a worker that dies
    mid-request is noticed after `heartbeat_timeout` and the request retried elsewhere.
    The defaults are the agent's (`towline.options`); no `retry_policy` takes
    `model_retry_policy()`, as `Agent.model_retry_policy` does.

    `output_mode` and `output_schema` (the output's JSON schema, in the `native` and
    `prompted` modes) reach the model in its `ModelInfo`, as do `native_tools` (the
    provider's own tools). A background call (`settings.background`) is polled after
    `poll_interval`, each later wait doubling up to `poll_max_interval`; still unfinished after
    `background_timeout`, it is cancelled and fails `BackgroundTimeout`.

    Inside an `AgentRun`, the request travels by reference (`towline.runtime.request_chain`):
    its input names the messages a worker already holds with one key, so its size
    does not grow with the conversation.
    """
    found = scope.state()  # hook code: no caller hands it the run
    call = await request_model(
        found if isinstance(found, Run) else None, model, messages, tools=tools,
        output_tools=output_tools, output_mode=output_mode, output_schema=output_schema,
        settings=settings, native_tools=native_tools,
        run_step=run_step, agent=agent, summary=summary, timeout=timeout,
        retry_policy=retry_policy, heartbeat_timeout=heartbeat_timeout,
        poll_interval=poll_interval, poll_max_interval=poll_max_interval,
        background_timeout=background_timeout)
    return call.response


async def request_model(
    run: Run | None,
    model: str,
    messages: list[Message],
    *,
    tools: list[ToolDefinition] | None = None,
    output_tools: list[ToolDefinition] | None = None,
    output_mode: OutputMode = "tool",
    output_schema: dict[str, Any] | None = None,
    settings: ModelSettings | None = None,
    native_tools: list[NativeTool] | None = None,
    run_step: int = 0,
    agent: str = "",
    summary: str | None = None,
    timeout: timedelta = MODEL_TIMEOUT,
    retry_policy: RetryPolicy | None = None,
    heartbeat_timeout: timedelta | None = DEFAULT_HEARTBEAT_TIMEOUT,
    poll_interval: timedelta = MODEL_POLL_INTERVAL,
    poll_max_interval: timedelta = MODEL_POLL_MAX_INTERVAL,
    background_timeout: timedelta = BACKGROUND_TIMEOUT,
    max_requests: int | None = None,
    answered: Callable[[ModelResponse], None] | None = None,
) -> ModelCall:
    """`call_model` for `run` (None: outside an `AgentRun`), and how many model requests it
    made (more than one when the provider paused the turn: each continuation is a request,
    `max_requests` at most; `answered` is told of each paused piece before its continuation is
    sent, see `complete`)."""
    settings = settings or ModelSettings()
    definitions = RequestDefinitions(tools=tools or [], output_tools=output_tools or [],
                                     settings=settings, output_mode=output_mode,
                                     output_schema=output_schema,
                                     native_tools=NATIVE_TOOLS.dump_python(native_tools or [], mode="json"))
    plan = CallPlan(
        model=model, run_step=run_step, agent=agent,
        summary=summary or _summary(model, run_step, native_tools or []),
        output_tools=[t.name for t in output_tools or []],
        timeout=timeout, retry_policy=retry_policy or model_retry_policy(),
        heartbeat_timeout=heartbeat_timeout, poll_interval=poll_interval,
        poll_max_interval=poll_max_interval, max_requests=max_requests,
        background_timeout=background_timeout, run=run,
    )

    async def send(sent: list[Message]) -> ModelResponse:
        return await _request(plan, sent, definitions)

    response = await send(messages)
    if response.suspended is None:
        return ModelCall(response, 1, response.usage)
    return await complete(plan, messages, response, send, answered)


def _summary(model: str, step: int, native: list[NativeTool]) -> str:
    """The model activity's summary in the UI: `<model> · step <n>`, then the provider's own
    tools it may run (`· web_search, code_execution`)."""
    tools = ", ".join(dict.fromkeys(t.kind for t in native))
    return f"{model} · step {step}" + (f" · {tools}" if tools else "")


async def _request(plan: CallPlan, messages: list[Message],
                   definitions: RequestDefinitions) -> ModelResponse:
    """One `towline.model_request` activity: the request by reference inside an `AgentRun`,
    inline elsewhere; its failures as the run's (`ModelRequestFailed`, ...)."""
    model = plan.model
    inp = ModelActivityInput(model=model, run_step=plan.run_step, agent=plan.agent)
    book = plan.run.request_book if plan.run is not None else None
    limit = plan.payload_limit
    n: int | None = None
    if book is not None:
        # Refused like an inline request would be: a worker that misses the messages
        # fetches them all in one query answer, and a provider receives them all.
        chain, inline = book.open(messages, definitions)
        n = chain.n
        inp = inp.model_copy(update={"chain": chain})
        size = max(inline + oversize(definitions, 0), oversize(inp, 0))
        size = size if size > limit else 0
    else:
        inp = inp.model_copy(update={"messages": messages, **dict(definitions)})
        size = oversize(inp, limit)
    if size:
        if book is not None and n is not None:
            book.close(n)
        raise runtime_failure(
            PayloadTooLarge(f"model request of {size} bytes exceeds the {limit}-byte limit")
        )
    try:
        raw = await schedule_model_activity(plan, MODEL_ACTIVITY, inp, plan.summary)
        response = validated(model, raw)
        if book is not None and n is not None and response.id:
            book.answered(n, response)  # its worker keeps it: the next request names it by key
        return response
    finally:
        if book is not None and n is not None:
            book.close(n)


async def schedule_model_activity(plan: CallPlan, activity: str, arg: Any, summary: str,
                                  timeout: timedelta | None = None) -> Any:
    """Schedule one of the model activities (the request, a background poll or cancel) the one
    way they all are: the model's task queue and the run's priority, Temporal's retries; its
    failure as the run's. Decoded as plain JSON: the caller validates it (a response that
    does not decode would otherwise fail the workflow *task* and leave the run stuck)."""
    # Fleet: the model's own task queue (a shared rate limit) and the run's priority;
    # see `towline.fleet.routing`.
    dispatch = plan.dispatch
    model = plan.model
    try:
        return await workflow.execute_activity(
            activity, arg, cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            if _WAIT_ON_CANCEL.get() else ActivityCancellationType.TRY_CANCEL,
            start_to_close_timeout=timeout or plan.timeout,
            heartbeat_timeout=plan.heartbeat_timeout if timeout is None else None,
            retry_policy=plan.retry_policy, summary=summary,
            task_queue=dispatch.model_queue(model), priority=dispatch.priority,
        )
    except ActivityError as e:
        cause = e.cause or e
        if isinstance(cause, CancelledError):
            raise runtime_failure(Cancelled("the run was cancelled during a model call")) from e
        if isinstance(cause, ApplicationError) and cause.type in _TOO_LARGE:
            raise runtime_failure(PayloadTooLarge(
                f"model {model!r} answered too large a response: {cause}",
                usage=_reported_usage(cause),
            )) from e
        if isinstance(cause, ApplicationError) and cause.type == CONTEXT_LENGTH:
            raise runtime_failure(ContextLengthExceeded(f"model {model!r} failed: {cause}")) from e
        raise runtime_failure(ModelRequestFailed(f"model {model!r} failed: {cause}")) from e


def validated(model: str, raw: Any) -> ModelResponse:
    """A model activity's answer as a `ModelResponse`, or the run fails `ModelRequestFailed`."""
    try:
        return ModelResponse.model_validate(raw)
    except ValidationError as e:
        raise runtime_failure(
            ModelRequestFailed(f"model {model!r} answered an invalid response: {e}")
        ) from None


def _reported_usage(cause: ApplicationError) -> Usage | None:
    """The usage a failed model activity reported in its details (a response too large)."""
    try:
        return Usage.model_validate(cause.details[0]) if cause.details else None
    except (ValidationError, TypeError):
        return None


def wait_cancellation_completed() -> None:
    """Model activities scheduled from here on in the calling task, once cancelled, wait until
    the activity's worker answers the cancellation (Temporal's `WAIT_CANCELLATION_COMPLETED`),
    so a response that was already complete still comes back and its usage is counted.

    The task's context is its own (asyncio copies it), so the setting ends with the task:
    a parallel `InputGuardrail` calls it in the task that makes the run's model request.
    """
    _WAIT_ON_CANCEL.set(True)


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
    """Finish a suspended call (see the module's docstring: responses a provider has not
    finished); `send` makes one more request.

    `answered` is told of each piece of a paused turn as it is done, before the request that
    continues it is sent (the run counts it then, so that request's ledger header holds it, and
    may refuse to go on: a spending limit); the last piece is left to the caller
    (`ModelCall.unreported`). Without `answered` (a hook's call) the joined response's usage
    is the whole call's."""
    pieces = [first]
    requests, polls = 1, 0
    wait = poll_waits(plan.poll_interval, plan.poll_max_interval)
    response = first
    started = workflow.now()
    while response.suspended is not None:
        suspended = response.suspended
        if suspended.reason == "background":
            left = _time_left(plan, started, polls)
            if left is None:
                await _give_up(plan, suspended, polls)
            delay = min(wait(polls), left)  # the last poll comes as the time is up
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


async def _poll(plan: CallPlan, suspended: Suspended, wait: timedelta, n: int) -> ModelResponse:
    """Wait `wait` (a durable timer), then ask once how the background response is doing."""
    inp = _background_input(plan, suspended)
    where = f"{plan.model} · step {plan.run_step}"
    try:
        try:
            await workflow.wait_condition(lambda: _cancel_requested(plan), timeout=wait,
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


def _cancel_requested(plan: CallPlan) -> bool:
    """Whether towline's `cancel` signal reached the run (`Steering.cancelled`)."""
    return plan.run is not None and plan.run.steering.cancelled


async def _cancel(plan: CallPlan, inp: BackgroundInput, where: str) -> None:
    """Cancel the background response (best effort: the run ends `Cancelled` either way)."""
    try:
        await schedule_model_activity(plan, MODEL_CANCEL_ACTIVITY, inp, f"{where} · cancel",
                                      timeout=POLL_TIMEOUT)
    except RunFailure as e:
        workflow.logger.warning("could not cancel background response %s: %s",
                                inp.response_id, e.message)
