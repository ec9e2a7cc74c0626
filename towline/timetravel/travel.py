"""Time travel: fork a run at a step, or reset it to a step (`towline fork`, `towline reset`).

Both read the run's history (`towline.replay.run_history`), the exact record of what it did.

- `fork` starts a NEW run of the same agent from the conversation the model was sent at
  step N, before its request (the instructions left out: the new run renders its own);
  after a handoff, of the agent that made step N's request.
  Its contributed state is the state the run had then (recorded by the run, see
  `towline.timetravel.lineage`); everything else starts fresh: a fork's ledger counts from zero,
  because the original's counters are never carried into another run (a fork cannot
  forge a ledger). Without a prompt the model is asked step N again; with one, the
  prompt follows as a new user message. Its start request records the lineage: memo
  `towline.forked_from` and, where the namespace has it registered, the
  `TowlineForkedFrom` search attribute (the origin's workflow id).
- `reset` is Temporal's own ResetWorkflowExecution, to the workflow task that scheduled
  step N's model request: the run's history is kept up to that task and the run goes on
  from there on today's workers, so its ledger is exactly what the history re-derives.
  Tool calls after that point run again; `plan_reset` lists those that may have taken
  effect and are not declared idempotent, and `reset` refuses them unless forced.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import ResetReapplyExcludeType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.service import RPCError

from towline.messages import prompt_text
from towline.replay.records import without_instructions
from towline.replay.run_history import (
    HistoryReadError,
    RecordedRequest,
    RecordedToolCall,
    RunHistory,
    read_run_history,
)
from towline.results import RunInput, RunResult
from towline.runtime import search_attributes as sa
from towline.runtime.queues import DEFAULT_TASK_QUEUE, is_own_queue
from towline.runtime.registration import unregistered_attribute
from towline.timetravel.lineage import FORKED_FROM_MEMO, ForkedFrom

__all__ = [
    "TimeTravelError",
    "UnknownStep",
    "NotIdempotent",
    "ForkPlan",
    "ResetPlan",
    "plan_fork",
    "start_fork",
    "fork",
    "plan_reset",
    "reset",
]


class TimeTravelError(Exception):
    """A fork or reset that cannot be made (the message says why)."""


class UnknownStep(TimeTravelError):
    """The run made no model request at that step."""


class NotIdempotent(TimeTravelError):
    """A reset would run again tool calls that may have taken effect and are not idempotent."""

    def __init__(self, message: str, calls: list[RecordedToolCall]) -> None:
        super().__init__(message)
        self.calls = calls
        """The calls, in order."""


@dataclass(frozen=True)
class ForkPlan:
    """What a fork starts: its input and lineage, and what it could not carry."""

    origin: ForkedFrom
    """The run and step it forks."""
    input: RunInput
    """The new run's input."""
    task_queue: str
    """The origin's task queue (the new run's, unless told otherwise), or `towline` for a
    run on a `towline run` command's own queue (`towline.runtime.queues.is_own_queue`)."""
    notes: list[str] = field(default_factory=list[str])
    """What the fork could not take over as it was (e.g. a state the run did not record)."""


@dataclass(frozen=True)
class ResetPlan:
    """Where a reset to a step goes, and the tool calls that would run again."""

    workflow_id: str
    step: int
    execution: str
    """The Temporal run id of the execution that made the step's request."""
    event_id: int
    """The `WorkflowTaskCompleted` event the reset goes to (`workflow_task_finish_event_id`)."""
    task_queue: str
    rerun: list[RecordedToolCall]
    """Every tool call after the step's request (they run again)."""

    @property
    def unsafe(self) -> list[RecordedToolCall]:
        """Those that may have taken effect and are not declared idempotent."""
        return [c for c in self.rerun if c.may_have_taken_effect and not c.idempotent]


async def _read(client: Client, run_id: str) -> RunHistory:
    try:
        return await read_run_history(client, run_id)
    except HistoryReadError as e:
        raise TimeTravelError(str(e)) from None


def _input(run: RunHistory) -> RunInput:
    if run.input is None:
        raise TimeTravelError(f"the input of run {run.workflow_id!r} is not a RunInput")
    return run.input


def _step_request(run: RunHistory, step: int, flag: str) -> RecordedRequest:
    request = run.request(step)
    if request is None:
        steps = run.steps
        made = (f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}") \
            if steps else "no step"
        raise UnknownStep(f"run {run.workflow_id!r} made no model request at step {step} "
                          f"(its history holds {made}); {flag} names one of them")
    return request


async def plan_fork(
    client: Client, run_id: str, *, at_step: int, prompt: str | None = None,
    model: str | None = None,
) -> ForkPlan:
    """The input of a fork of `run_id` before step `at_step` (see the module docstring)."""
    if at_step < 1:
        raise UnknownStep(f"steps are numbered from 1, not {at_step}")
    if prompt is not None and not prompt.strip():
        raise TimeTravelError("the prompt is empty")
    run = await _read(client, run_id)
    request = _step_request(run, at_step, "--at-step")
    resolved = request.resolved
    if resolved is None:
        raise TimeTravelError(f"the request of step {at_step} cannot be rebuilt from the "
                              f"history: {request.problem}")
    messages = without_instructions(resolved)
    state, unknown = run.state_before(request)
    original = _input(run)
    notes: list[str] = []
    if state is None:
        notes.append(f"the contributed state before step {at_step} is not known ({unknown}): "
                     "the fork starts from the state the run started with")
    # after a handoff, the fork starts as the agent that made the step's request (and on its
    # own model: the original's override was its first agent's)
    agent = request.agent or original.agent
    handed = agent != original.agent
    if handed:
        notes.append(f"step {at_step} was made by agent {agent!r}, which the run had been handed "
                     f"to: the fork starts as {agent!r}")
    inp = RunInput(
        agent=agent, prompt=prompt, message_history=messages, limits=original.limits,
        # the typed context (`Agent.context_type`) as the original's, the state as it was then
        context={**(original.context or {}), **state} if state is not None else original.context,
        allowed_tools=original.allowed_tools, model=model or (None if handed else original.model),
        stream=original.stream, session=original.session,
        session_timeout=original.session_timeout,
        continue_as_new_after_events=original.continue_as_new_after_events,
    )
    # a `towline run` command's own queue has no worker once the command ended: the fleet's
    queue = DEFAULT_TASK_QUEUE if is_own_queue(run.task_queue) else run.task_queue
    return ForkPlan(origin=ForkedFrom(run_id=run_id, step=at_step), input=inp,
                    task_queue=queue, notes=notes)


async def start_fork(
    client: Client, plan: ForkPlan, *, id: str | None = None, task_queue: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start the run `plan` describes; returns its handle.

    `id` defaults to `<origin>-fork<step>-<random>`; an id in use (by a live or a closed
    run) is refused with `WorkflowAlreadyStartedError`. The lineage goes in the start
    request (not billed): the memo, and the search attributes where registered (a namespace
    that lacks `TowlineForkedFrom` gets the others; one that lacks them all, none).
    """
    origin = plan.origin
    workflow_id = id or f"{origin.run_id}-fork{origin.step}-{uuid.uuid4().hex[:6]}"
    agent = plan.input.agent
    base: list[SearchAttributePair[Any]] = list(sa.start_attributes(agent))
    lineage: SearchAttributePair[Any] = SearchAttributePair(sa.FORKED_FROM, origin.run_id)
    head = plan.input.prompt if plan.input.prompt is not None else f"step {origin.step} again"
    summary = f"{agent}: fork of {origin.run_id} at step {origin.step}: {prompt_text(head)}"[:200]
    attempts = (TypedSearchAttributes([*base, lineage]), TypedSearchAttributes(base), None)
    for i, attributes in enumerate(attempts):
        try:
            return await client.start_workflow(
                "AgentRun", plan.input, id=workflow_id, task_queue=task_queue or plan.task_queue,
                result_type=RunResult, memo={FORKED_FROM_MEMO: origin.model_dump(mode="json")},
                search_attributes=attributes, static_summary=summary,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except RPCError as e:
            if i == len(attempts) - 1 or not unregistered_attribute(e):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def fork(
    client: Client,
    run_id: str,
    *,
    at_step: int,
    prompt: str | None = None,
    model: str | None = None,
    id: str | None = None,
    task_queue: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a new run from run `run_id`'s conversation before step `at_step`; its handle.

    Without `prompt` the model is asked step `at_step` again; with it, `prompt` is a new
    user message after that conversation. `model` runs the fork on another model (one its
    worker allows). The fork's counters start at zero; its contributed state is the
    origin's before that step; its lineage is in memo `towline.forked_from`. Raises
    `UnknownStep` for a step the run did not make, `TimeTravelError` for a run it cannot
    read.
    """
    plan = await plan_fork(client, run_id, at_step=at_step, prompt=prompt, model=model)
    return await start_fork(client, plan, id=id, task_queue=task_queue)


async def plan_reset(client: Client, run_id: str, *, to_step: int) -> ResetPlan:
    """Where a reset of `run_id` to step `to_step` goes, and the tool calls it would repeat."""
    if to_step < 1:
        raise UnknownStep(f"steps are numbered from 1, not {to_step}")
    run = await _read(client, run_id)
    request = _step_request(run, to_step, "--to-step")
    if not request.task_event_id:
        raise TimeTravelError(f"no workflow task scheduled step {to_step}'s request")
    return ResetPlan(workflow_id=run_id, step=to_step, execution=request.execution,
                     event_id=request.task_event_id, task_queue=run.task_queue,
                     rerun=run.calls_after(request))


async def reset(
    client: Client, run_id: str, *, to_step: int, reason: str | None = None,
    force: bool = False, plan: ResetPlan | None = None,
) -> str:
    """Reset run `run_id` to the workflow task that scheduled step `to_step`'s model request
    (Temporal's ResetWorkflowExecution); returns the new execution's Temporal run id.

    Refuses with `NotIdempotent` when tool calls after that point may have taken effect and
    are not declared idempotent (they would run again), unless `force`. `plan` is a
    `plan_reset` answer to act on (read again when not given).
    """
    plan = plan or await plan_reset(client, run_id, to_step=to_step)
    unsafe = plan.unsafe
    if unsafe and not force:
        names = ", ".join(sorted({c.tool for c in unsafe}))
        noun = "call" if len(unsafe) == 1 else "calls"
        raise NotIdempotent(
            f"resetting run {run_id!r} to step {to_step} would run {len(unsafe)} tool {noun} "
            f"again that may have taken effect and whose tools are not idempotent ({names}); "
            "reset anyway with --yes (force=True)", unsafe)
    request = ResetWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=run_id, run_id=plan.execution),
        reason=reason or f"towline reset to step {to_step}",
        workflow_task_finish_event_id=plan.event_id,
        request_id=str(uuid.uuid4()), identity=client.identity,
        # Updates after the reset point (decisions, messages) belong to the abandoned branch:
        # an approval is used up by the execution it allowed, so the new branch asks anew.
        reset_reapply_exclude_types=[ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE],
    )
    try:
        response = await client.workflow_service.reset_workflow_execution(request)
    except RPCError as e:
        raise TimeTravelError(f"Temporal refused the reset of {run_id!r} to event "
                              f"{plan.event_id}: {e.message}") from None
    return response.run_id

