"""What hook code may use of the running `AgentRun` (`towline.workflows.current_run()`).

Approvals before engine 4 (`request_approval`; engine 4's are `approval_updates`), the run's
tool authority, usage reporting for hooks that cannot return `llm_usage`, and a read-only view
of the run. `AgentRun` inherits these; they live apart so the workflow module stays about the
run loop.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow

from towline.agent import Agent
from towline.errors import Cancelled, InternalError, UsageLimitExceeded, runtime_failure
from towline.events import EventType
from towline.messages import Message, Usage
from towline.results import Counters, RunStatus
from towline.telemetry import tracing as telemetry
from towline.tools import ToolCall, ToolContext

from . import handoffs
from .decisions import ApprovalDecision
from .events import emit
from .run import Run
from .versions import at_least

__all__ = ["ApprovalDecision", "HookApi", "RunView"]


@dataclass(frozen=True)
class RunView:
    """What hook code may read of a run (`current_run().agent_run`); changing it changes nothing."""

    agent: Agent
    """The running agent's definition."""
    run_id: str
    """The run's id (the first execution's workflow id)."""
    counters: Counters
    """The confirmed counters (frozen)."""
    status: RunStatus
    """running, waiting, succeeded or failed (a `RunStatus`, a `str`)."""
    state: dict[str, Any]
    """A copy of the committed contributed state."""


class HookApi:
    """Approvals, authority, usage reporting and the run view (a base of `AgentRun`)."""

    _run: Run | None
    _cancelled: bool
    _decisions: dict[str, ApprovalDecision]
    _approved: set[str]
    _guard_lock: asyncio.Lock | None = None
    """Engine 5: held by one guard model request at a time while the run has a request,
    token or cost limit (`guard_request`)."""

    def _check_cancelled(self) -> None:
        if self._cancelled:
            raise runtime_failure(Cancelled("the run was cancelled"))

    async def request_approval(
        self, ctx: ToolContext, call: ToolCall, timeout: timedelta | None
    ) -> ApprovalDecision | None:
        """Wait durably for a decision on `call`; None means rejected by timeout."""
        run = self._require_run()
        call_id = call.tool_call_id
        if at_least(3):  # a decision is for one call: a later call reusing its id asks anew
            self._decisions.pop(call_id, None)
            self._approved.discard(call_id)
        # `requested_at` (workflow time, so replay-safe) lets operators see how long it waited.
        run.pending_approvals[call_id] = {
            "tool_name": call.tool_name, "args": call.args, "run_step": ctx.run_step,
            "requested_at": workflow.now().isoformat(),
        }
        run.confirm(RunStatus.WAITING)
        emit(EventType.APPROVAL, step=ctx.run_step, call_id=call_id, tool=call.tool_name, args=call.args)
        asked = workflow.now()
        try:
            await workflow.wait_condition(
                lambda: call_id in self._decisions or self._cancelled, timeout=timeout
            )
        except TimeoutError:
            self._decisions[call_id] = ApprovalDecision(call_id=call_id, reason="approval timed out")
            telemetry.approval_waited(run.agent.name, call.tool_name, "timeout", workflow.now() - asked)
            return self._settle(run, call_id, None)
        self._check_cancelled()
        outcome = "approved" if call_id in self._approved else "rejected"
        telemetry.approval_waited(run.agent.name, call.tool_name, outcome, workflow.now() - asked)
        return self._settle(run, call_id, self._decisions[call_id])

    def _settle(self, run: Run, call_id: str, decision: ApprovalDecision | None) -> ApprovalDecision | None:
        outcome = ("timed_out" if decision is None
                   else "approved" if call_id in self._approved else "rejected")
        emit(EventType.DECISION, call_id=call_id, decision=outcome,  # streaming
             reason=decision.reason if decision is not None else "approval timed out")
        run.pending_approvals.pop(call_id, None)
        run.confirm(RunStatus.WAITING if run.pending_approvals else RunStatus.RUNNING)
        return decision

    def authority(self) -> frozenset[str]:
        """Tools this run may execute: its inventory, narrowed by any ancestor's authority."""
        run = self._require_run()
        names = frozenset(run.tools)
        return names if run.allowed_tools is None else names & run.allowed_tools

    def hand_off(self, target: str, input_filter: Callable[[list[Message]], Any] | None,
                 ctx: ToolContext, *, on_handoff: Callable[..., Any] | None = None) -> None:
        """Hand the run to agent `target` once the current batch of tool calls is recorded
        (from a `Handoff`'s tool; see `workflows.handoffs`), calling `on_handoff` then.
        `ToolError` for a second one in a response."""
        handoffs.request(self._require_run(), target, input_filter, ctx, on_handoff=on_handoff)

    def report_usage(self, usage: Usage) -> None:
        """Report model usage a hook incurred where it cannot return `llm_usage`.

        For `wrap_model_call` and tool hooks (e.g. a tool selector's own model
        call). The usage is held apart and merged into the run's usage and ledger
        by the runtime at the next commit (end of the turn or of the tool batch),
        exactly like a middleware update's `llm_usage`; hooks never write the
        counters themselves.
        """
        if not isinstance(usage, Usage):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"report_usage takes a Usage, not {type(usage).__name__}")
        run = self._require_run()
        run.reported_usage = run.reported_usage + usage

    @asynccontextmanager
    async def guard_request(self, guardrail: str, *,
                            alongside: int = 0) -> AsyncGenerator[Callable[[Usage], None]]:
        """Engine 5: the span of one guard model request (`towline.capabilities` guardrails),
        metered like the run's own requests; yields `answered(usage)`, to call with the
        response's usage.

        Before the request is sent, the run's limits are checked (`UsageLimitExceeded`, the
        request never sent): `request_limit` against every request the run paid for
        (`Run.requests_paid`: its own and its guards') plus `alongside` (requests in flight beside it: the model
        request a parallel `InputGuardrail` runs with), and `total_tokens_limit` and
        `cost_limit` against the confirmed counters. While
        the run has any of those limits, its guard requests go one at a time, so that each is
        checked after the one before was counted (the results of a batch of tool calls are
        guarded together). `answered` adds the request and its usage to the run's usage, tokens
        and cost at once (not at the next commit, as `report_usage` does), then checks the
        token and cost limits again. The ledger's `requests` stays the run's own requests (a
        request n's header says n - 1); `usage.requests` counts the guards' too.
        """
        run = self._require_run()
        limits = run.limits
        metered = (limits.request_limit, limits.total_tokens_limit, limits.cost_limit)
        one_at_a_time: AbstractAsyncContextManager[Any] = nullcontext()
        if any(limit is not None for limit in metered):
            one_at_a_time = self._guard_lock = self._guard_lock or asyncio.Lock()
        async with one_at_a_time:
            limit = limits.request_limit
            if limit is not None and run.requests_paid() + alongside >= limit:
                raise runtime_failure(UsageLimitExceeded(
                    f"request_limit {limit} reached: no request is left for guardrail "
                    f"{guardrail!r}"))
            run.check_spend()

            def answered(usage: Usage) -> None:
                run.guard_requests += 1
                run.add_usage(usage)
                run.check_spend()

            yield answered

    @property
    def agent_run(self) -> RunView:
        """A read-only view of the run for hook code (agent, ids, confirmed counters)."""
        run = self._require_run()
        return RunView(agent=run.agent, run_id=run.run_id, counters=run.counters,
                       status=run.status, state=copy.deepcopy(run.state))

    def _require_run(self) -> Run:
        if self._run is None:
            raise InternalError("the run has not started")
        return self._run

    def is_approved(self, call_id: str) -> bool:
        """Whether the decision on `call_id` was an approval."""
        return call_id in self._approved
