"""The hook context's workings: what hook code may do in the running `AgentRun`.

`towline.hook_context()` is the public way in (`towline.hooks` documents it): it finds
the running `AgentRun`'s `HookApi` through the run's scope (`workflows.scope`) and hands hook
code a `HookContext` bound to it, so a capability written outside towline can do what the built-ins
do (call a model durably, ask a person, wait, emit an event, report usage, meter a guard
request, hand off, run a child agent, read the run). `HookApi` is the part `AgentRun` composes
for the context to call (the run's tool authority, usage reporting, guard requests, the run
view, the approvals desk's waits); it lives apart so the workflow module stays about the run
loop.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy

from towline.agent import Agent
from towline.errors import InternalError, UsageLimitExceeded, runtime_failure
from towline.events import EventType
from towline.messages import Message, ModelResponse, Usage
from towline.native_tools import NativeTool
from towline.options import ModelSettings, OutputMode
from towline.results import Counters, RunInput, RunResult, RunStatus
from towline.tools import ToolCall, ToolContext, ToolDefinition

from . import handoffs, scope
from .decisions import ApprovalDecision
from .guard import Guard, guarded, guarded_sync
from .model_call import request_model, wait_cancellation_completed
from .output import NO_OUTPUT, final_output
from .run import Run

if TYPE_CHECKING:
    from towline.fleet.routing import Dispatch

    from .approval_updates import ApprovalDesk
    from .events import RunStream

__all__ = ["ApprovalDecision", "HookApi", "HookContext", "RunView", "hook_context"]


@dataclass(frozen=True)
class RunView:
    """What hook code may read of a run (`HookContext.run`); changing it changes nothing."""

    agent: Agent
    """The running agent's definition (the handoff's target, after a handoff)."""
    run_id: str
    """The run's id (the first execution's workflow id)."""
    counters: Counters
    """The confirmed counters (frozen)."""
    status: RunStatus
    """running, waiting, succeeded or failed (a `RunStatus`, a `str`)."""
    state: dict[str, Any]
    """A copy of the committed contributed state."""


class HookApi:
    """Authority, usage reporting, guard requests, the run view and the approvals desk's waits:
    what a `HookContext` acts on (a part `AgentRun` builds, and hands the run's `Run` once it
    exists, `run`)."""

    def __init__(self, stream: RunStream, approvals: ApprovalDesk, dispatch: Dispatch) -> None:
        self.stream = stream
        """The run's live events."""
        self.approvals = approvals
        """The run's decisions."""
        self.dispatch = dispatch
        """The run's model routes and priority (`AgentRun` sets the run's own once known)."""
        self.run: Run | None = None
        """The run's state, once `AgentRun` has built it."""
        self._guard_lock: asyncio.Lock | None = None
        """Held by one guard model request at a time while the run has a request, token or cost
        limit (`guard_request`)."""

    def authority(self) -> frozenset[str]:
        """Tools this run may execute: its inventory, narrowed by any ancestor's authority."""
        run = self.require_run()
        names = frozenset(run.inventory.tools)
        return names if run.inventory.allowed_tools is None else names & run.inventory.allowed_tools

    def hand_off(self, target: str, input_filter: Callable[[list[Message]], Any] | None,
                 ctx: ToolContext, *, on_handoff: Callable[..., Any] | None = None) -> None:
        """Hand the run to agent `target` once the current batch of tool calls is recorded
        (from a `Handoff`'s tool; see `workflows.handoffs`), calling `on_handoff` then.
        `ToolError` for a second one in a response."""
        handoffs.request(self.require_run(), target, input_filter, ctx, on_handoff=on_handoff)

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
        run = self.require_run()
        run.ledger.reported_usage = run.ledger.reported_usage + usage

    @asynccontextmanager
    async def guard_request(self, guardrail: str, *,
                            alongside: int = 0) -> AsyncGenerator[Callable[[Usage], None]]:
        """The span of one guard model request (`towline.capabilities` guardrails), metered
        like the run's own requests; yields `answered(usage)`, to call with the response's
        usage.

        Before the request is sent, the run's limits are checked (`UsageLimitExceeded`, the
        request never sent): `request_limit` against every request the run paid for
        (`Ledger.requests_paid`: its own and its guards') plus `alongside` (requests in flight
        beside it: the model request a parallel `InputGuardrail` runs with), and
        `total_tokens_limit` and `cost_limit` against the confirmed counters. While
        the run has any of those limits, its guard requests go one at a time, so that each is
        checked after the one before was counted (the results of a batch of tool calls are
        guarded together). `answered` adds the request and its usage to the run's usage, tokens
        and cost at once (not at the next commit, as `report_usage` does), then checks the
        token and cost limits again. The ledger's `requests` stays the run's own requests (a
        request n's header says n - 1); `usage.requests` counts the guards' too.
        """
        run = self.require_run()
        limits = run.limits
        metered = (limits.request_limit, limits.total_tokens_limit, limits.cost_limit)
        one_at_a_time: AbstractAsyncContextManager[Any] = nullcontext()
        if any(limit is not None for limit in metered):
            one_at_a_time = self._guard_lock = self._guard_lock or asyncio.Lock()
        async with one_at_a_time:
            limit = limits.request_limit
            if limit is not None and run.ledger.requests_paid() + alongside >= limit:
                raise runtime_failure(UsageLimitExceeded(
                    f"request_limit {limit} reached: no request is left for guardrail "
                    f"{guardrail!r}"))
            run.ledger.check_spend()

            def answered(usage: Usage) -> None:
                run.ledger.guard_requests += 1
                run.ledger.add_usage(usage)
                run.ledger.check_spend()

            yield answered

    @property
    def agent_run(self) -> RunView:
        """A read-only view of the run for hook code (agent, ids, confirmed counters)."""
        run = self.require_run()
        return RunView(agent=run.agent, run_id=run.run_id, counters=run.ledger.counters,
                       status=run.ledger.status, state=copy.deepcopy(run.state))

    def require_run(self) -> Run:
        """The run's state (`InternalError` before the run has started)."""
        if self.run is None:
            raise InternalError("the run has not started")
        return self.run

    def is_approved(self, call_id: str) -> bool:
        """Whether the decision on `call_id` was an approval."""
        return self.approvals.is_approved(call_id)

    async def request_approval(self, ctx: ToolContext, call: ToolCall,
                               timeout: timedelta | None, *,
                               metadata: Mapping[str, Any] | None = None
                               ) -> ApprovalDecision | None:
        """Wait durably for a person's decision on `call` (the approvals desk's)."""
        return await self.approvals.request_approval(ctx, call, timeout, metadata=metadata)

    async def gate(self, ctx: ToolContext, call: ToolCall, policy: Any) -> ToolCall:
        """Apply an approval policy to `call` (the approvals desk's)."""
        return await self.approvals.gate(ctx, call, policy)


def hook_context() -> HookContext:
    """The `HookContext` of the running `AgentRun` (`TypeError` outside one)."""
    found = scope.hooks()
    if not isinstance(found, HookApi):
        raise TypeError("hook_context() is for hook code: it is not running inside an AgentRun")
    return HookContext(found)


class HookContext:
    """What hook code may do in the running run: the public face of `AgentRun` for capabilities.

    Get it with `towline.hook_context()` inside a hook, a `wrap_model_call` wrapper or an
    `in_workflow` tool (workflow code, replayed: everything here is durable or deterministic).
    It holds no state of its own; each method acts on the run it was made for.
    """

    NO_OUTPUT: Final[Any] = NO_OUTPUT
    """What `final_output` returns for a response that gives no valid final output."""

    __slots__ = ("_agent_run",)

    def __init__(self, agent_run: HookApi) -> None:
        self._agent_run = agent_run

    # --- reading the run -------------------------------------------------------------------

    @property
    def run(self) -> RunView:
        """A read-only view of the run: its agent, id, confirmed counters, status and a copy
        of its state. The counters are what the ledger confirmed, so a hook reads the same
        numbers on a replay."""
        return self._agent_run.agent_run

    @property
    def context(self) -> Any:
        """A copy of the run's typed context (`RunInput.context` as the agent's
        `context_type`), or None when the agent declares none: what the run was started
        with, for a hook to decide by; changing the copy changes nothing."""
        return copy.deepcopy(self._agent_run.require_run().context)

    def authority(self) -> frozenset[str]:
        """The tools this run may execute: its inventory, narrowed by any ancestor run's
        (a `Subagent`'s child may run only what its parent may)."""
        return self._agent_run.authority()

    def final_output(self, response: ModelResponse) -> Any:
        """What `response` gives as the running agent's final answer, as `RunResult.output`
        would hold it (text, or the validated output as JSON), or `HookContext.NO_OUTPUT` (it
        calls tools, or its output is invalid and the run will ask again). Records nothing:
        for a hook that judges an answer before the run takes it (`OutputGuardrail`)."""
        return final_output(self._agent_run.require_run().agent, response)

    # --- models ------------------------------------------------------------------------------

    async def call_model(
        self,
        model: str,
        messages: list[Message],
        *,
        summary: str | None = None,
        run_step: int | None = None,
        settings: ModelSettings | None = None,
        tools: list[ToolDefinition] | None = None,
        output_tools: list[ToolDefinition] | None = None,
        output_mode: OutputMode = "tool",
        output_schema: dict[str, Any] | None = None,
        native_tools: list[NativeTool] | None = None,
        timeout: timedelta | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> ModelResponse:
        """Call `model` (a name the worker knows) durably: one `towline.model_request`
        activity, retried by Temporal, never sent again by a replay. Raises
        `ModelRequestFailed` if it fails for good.

        The activity is named for the run's agent and `run_step` (default: the run's confirmed
        step) and shows `summary` in the UI; its timeouts and retries are the agent's
        (`Agent.model_timeout`, ...), unless `timeout` / `retry_policy` say otherwise. Its usage
        is not counted by itself: return it as `llm_usage` from a state hook, pass it to
        `report_usage`, or call inside `guard_request`, so the run's ledger counts it once.
        """
        view = self.run
        agent = view.agent
        run = self._agent_run.require_run()
        call = await request_model(
            run, model, messages, tools=tools, output_tools=output_tools, output_mode=output_mode,
            output_schema=output_schema, settings=settings, native_tools=native_tools,
            run_step=view.counters.run_step if run_step is None else run_step,
            agent=agent.name, summary=summary,
            timeout=agent.model_timeout if timeout is None else timeout,
            retry_policy=retry_policy or agent.model_retry_policy,
            heartbeat_timeout=agent.model_heartbeat_timeout)
        return call.response

    def guard_request(self, name: str, *,
                      alongside: int = 0) -> AbstractAsyncContextManager[Callable[[Usage], None]]:
        """`async with ctx.guard_request(name) as answered:` around a model request a guard
        (`name`) makes, then `answered(response.usage)`: the request is metered like the run's
        own. The run's request, token and cost limits are checked before it is sent
        (`UsageLimitExceeded`; `alongside`: requests in flight beside it), and its usage counts
        in the run's usage and limits as soon as it answered."""
        return self._agent_run.guard_request(name, alongside=alongside)

    def report_usage(self, usage: Usage) -> None:
        """Add model usage a hook incurred (its own `call_model`) to the run's usage and
        ledger, where the hook cannot return `llm_usage` (`wrap_model_call`, tool hooks).
        It is merged at the next commit (the end of the turn or of the tool batch); hooks
        never write the counters themselves."""
        self._agent_run.report_usage(usage)

    @staticmethod
    def wait_cancellation_completed() -> None:
        """Model calls made from the calling task from now on, once cancelled, wait until
        their activity's worker answers the cancellation, so a response that was already
        complete still comes back and its usage is counted (a guard racing the run's own
        model request, as a parallel `InputGuardrail` does, calls it in that request's task)."""
        wait_cancellation_completed()

    # --- people --------------------------------------------------------------------------------

    async def request_approval(self, ctx: ToolContext, call: ToolCall,
                               timeout: timedelta | None, *,
                               metadata: Mapping[str, Any] | None = None
                               ) -> ApprovalDecision | None:
        """Ask a person to approve or reject `call` and wait durably for the decision (no
        worker needs to stay up): the run's status is `waiting`, the `state` query lists the
        call under `pending_approvals` (with `metadata`, JSON, for the reviewer) and the
        `approval` event is published. None: no decision within `timeout` (None waits
        indefinitely). The decision is in the audit trail; `is_approved` says which it was."""
        return await self._agent_run.request_approval(ctx, call, timeout, metadata=metadata)

    def is_approved(self, call_id: str) -> bool:
        """Whether the decision `request_approval` got for `call_id` was an approval."""
        return self._agent_run.is_approved(call_id)

    async def gate(self, ctx: ToolContext, call: ToolCall, policy: Any) -> ToolCall:
        """Apply an approval `policy` (an object with `timeout` and `answer(tool, args,
        live)`, as `ToolApproval` has: `towline.workflows.approval_updates.ApprovalPolicy`) to
        `call`: the call to run (maybe edited by a
        reviewer), or `ToolDenied` / `ToolResponded`. A call the policy asks about waits
        durably for the decisions `approve`, `reject`, `edit`, `respond` or a remembered one;
        all of it goes in the audit trail."""
        return await self._agent_run.gate(ctx, call, policy)

    # --- time ------------------------------------------------------------------------------------

    @staticmethod
    def now() -> datetime:
        """The workflow's time (the same on a replay), never the machine's clock."""
        return workflow.now()

    @staticmethod
    async def sleep(duration: timedelta) -> None:
        """Wait `duration` on a durable timer (it survives the worker; a replay does not
        wait again)."""
        await workflow.sleep(duration)

    @staticmethod
    async def wait(condition: Callable[[], bool], timeout: timedelta | None = None) -> bool:
        """Wait durably until `condition()` holds (checked as the run's state changes):
        True, or False when `timeout` passed first."""
        try:
            await workflow.wait_condition(condition, timeout=timeout)
        except TimeoutError:
            return False
        return True

    # --- events --------------------------------------------------------------------------------

    def emit(self, kind: EventType, **fields: Any) -> None:
        """Publish a live event of type `kind` on the run's stream (`towline watch`,
        `towline.client.events`); `step` defaults to the run's confirmed step. No command and
        no history event: a replay publishes it again in the same place. None fields are
        left out; a value the converter refuses drops the event, never the run."""
        fields.setdefault("step", self.run.counters.run_step)
        self._agent_run.stream.publish(kind, **fields)

    # --- other agents ----------------------------------------------------------------------------

    def hand_off(self, target: str, ctx: ToolContext, *,
                 input_filter: Callable[[list[Message]], list[Message]] | None = None,
                 on_handoff: Callable[..., Any] | None = None) -> None:
        """From an `in_workflow` tool: go on as agent `target` once the calls of this response
        are recorded (the conversation as `input_filter` rewrites it; `on_handoff` called
        then). One per response: a second raises `ToolError`."""
        self._agent_run.hand_off(target, input_filter, ctx, on_handoff=on_handoff)

    async def run_agent(self, agent: str, prompt: str, *, id: str,
                        allowed_tools: list[str] | None = None,
                        summary: str | None = None) -> RunResult:
        """Run agent `agent` on `prompt` as a child `AgentRun` workflow (`id`, shown in the
        UI with `summary`) on this run's task queue, with its priority and fairness key, and
        return its result; `allowed_tools` narrows what the child may execute. A failed child
        raises Temporal's `ChildWorkflowError` (its cause the child's failure, whose details
        hold the partial run)."""
        priority = self._agent_run.dispatch.priority
        return await workflow.execute_child_workflow(
            "AgentRun",
            RunInput(agent=agent, prompt=prompt, allowed_tools=allowed_tools,
                     priority=priority.priority_key, tenant=priority.fairness_key),
            id=id, task_queue=workflow.info().task_queue, result_type=RunResult,
            static_summary=summary, priority=priority)

    # --- user code ---------------------------------------------------------------------------

    @staticmethod
    async def call_user_code(where: str, fn: Callable[..., Any], *args: Any,
                             capability: str = "", hook: str = "") -> Any:
        """`await fn(*args)` (or its plain result) under the determinism guard: for a
        capability that calls a function its user gave it (a check, a rule). A call to the
        clock, randomness, the environment or I/O, or a change to module-level state, fails
        the run `NondeterministicHook` naming `where` (`capability.hook` by default)."""
        return await guarded(Guard(where, capability=capability, hook=hook), fn, *args)

    @staticmethod
    def call_user_code_sync(where: str, fn: Callable[..., Any], *args: Any,
                            capability: str = "", hook: str = "") -> Any:
        """`call_user_code` for a function that must not be async (a rule answered while a
        decision update runs); needs no running hook."""
        return guarded_sync(Guard(where, capability=capability, hook=hook), fn, *args)
