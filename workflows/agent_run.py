"""The `AgentRun` workflow: a durable agent run.

Each turn (`turn.run_turn`) makes one model request through the hooks; the
admitted tool calls then execute as activities (`tool_exec`). The run ends with
a final output, or fails with a non-retryable `RunFailure` whose details carry
the partial run. Queries `state`/`messages`, the update `send` and the signals
`cancel`/`end` (`handlers`), and the updates `approve`/`reject` (`hook_api`) make it
inspectable and steerable while it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import SearchAttributeKey

from towline.agent import OUTPUT_TOOL_NAME, Agent
from towline.errors import (
    Cancelled,
    GuardrailTripped,
    InternalError,
    InvalidRunInput,
    MaxStepsExceeded,
    RunFailure,
    UnknownAgent,
    UsageLimitExceeded,
)
from towline.events import EventType, preview
from towline.fleet.routing import Dispatch
from towline.messages import ModelRequest, UserContent, UserPart, prompt_text
from towline.results import Counters, PartialRun, RunInput, RunResult, RunStatus, WorkerFacts
from towline.runtime import search_attributes as sa
from towline.runtime.ledger import MEMO_KEY, to_proto
from towline.runtime.registry import WorkerAgents, worker_agents
from towline.runtime.request_chain import RequestBook
from towline.telemetry import tracing as telemetry
from towline.timetravel.lineage import run_lineage

from . import handoffs
from .agent_versions import recorded_version
from .approvals import forget_turn, restore_approvals
from .client_tools import client_tools, run_client_tools
from .continuation import carried_input, check_fits, release, should_continue
from .events import RunStream, emit, emit_response, prior_stream_state
from .facts import worker_facts
from .finish import UNUSABLE, unusable_answer
from .handlers import RunHandlers, SendInput
from .hook_api import ApprovalDecision
from .instructions import resolve_instructions
from .mcp_tools import refresh_mcp_tools, restore_mcp_tools
from .output import CONTINUE, jumped_output, structured_output, text_output
from .refusals import refused_turn
from .run import PAYLOAD_LIMIT, Run, start_counters
from .run_context import check_context
from .run_input import agent_named_in, decode_run_input
from .steering import Interrupted
from .tool_exec import run_tool_calls
from .turn import TurnOutcome, run_turn
from .versions import (
    AGENT_VERSIONS,
    EARLY_STATUS,
    TRUNCATED_OUTPUT,
    VERSION_FIRST,
    at_least,
    engine,
    since,
)

__all__ = ["AgentRun", "ApprovalDecision", "SendInput"]


def _result(run: Run, output: Any, session_end: Any = None) -> RunResult:
    return RunResult(
        output=output, messages=run.messages, usage=run.usage, counters=run.counters,
        state=run.state, run_id=run.run_id, handoffs=run.handoffs, session_end=session_end,
    )


@workflow.defn(name="AgentRun", sandboxed=False)
class AgentRun(RunHandlers):
    """Runs one agent to a final output (docs/design.md says why it works as it does). It runs outside
    Temporal's sandbox, which restricted nothing in towline's passed-through code but cost a
    fifth of the worker's CPU; user hook code keeps its watch (docs/design.md)."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # streaming: the run's live events (`towline.events`); built here, as Temporal requires
        self.stream = RunStream(prior_stream_state(args))
        self._sends = 0
        self._run: Run | None = None
        self._inbox: list[str | list[UserContent]] = []
        self._cancelled = False
        self._ending = False
        self.session_end = None
        self._decisions: dict[str, ApprovalDecision] = {}
        self._approved: set[str] = set()
        self._resolutions = {}
        self._client_tools: list[Any] = []
        self.interruptible = self.interrupt_requested = self.model_in_flight = False  # steering
        self._on_busy = "queue"
        self._answers: list[tuple[int, Any]] = []
        self._consumed = 0
        self.request_book = RequestBook()
        self.payload_limit = PAYLOAD_LIMIT
        """The run's payload limit (`WorkerFacts.payload_limit`), read by `run.oversize`."""
        self._facts = WorkerFacts()
        self.dispatch = Dispatch()
        """Fleet: the run's model routes and priority (`towline.fleet.routing.current_dispatch`)."""
        self._ended = False
        self._closed = None
        self._released = False
        self._context: Any = None  # engine 5: the run's typed context (`check_context`)

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        # The input is taken untyped and decoded here (see `towline.runtime.converter`): input that
        # does not decode must end the run with InvalidRunInput, not fail the workflow
        # task, which Temporal would retry forever with the run stuck.
        engine()  # the engine-version marker comes first (see `versions`)
        if since(EARLY_STATUS):
            # Resolving emits no command, so it may come before the local activity in
            # histories written either way; the version's `workflow.patched` markers come
            # before it since `VERSION_FIRST`, after it before.
            version_first = since(VERSION_FIRST)
            try:
                inp, agent = self._resolve(args)
            except RunFailure as failure:
                facts = await self._worker_facts(args)
                raise await self._end_stream(self._fail_early(
                    failure, frozenset(facts.attributes), agent_named_in(args))) from None
            version = self._agent_version(agent) if version_first else None
            facts = await self._worker_facts(args)
            if not version_first:
                version = self._agent_version(agent)
        else:
            inp, agent = self._resolve(args)
            facts = await self._worker_facts(args)
            version = self._agent_version(agent)
        self._facts, self.payload_limit = facts, facts.payload_limit
        self._on_busy = inp.on_busy if inp.session and at_least(4) else "queue"
        if at_least(3):  # fleet (issue 23): model routes as the run's worker reported them, priority
            self.dispatch = Dispatch.of(facts.model_queues, inp.priority, inp.tenant)
        run = self._run = self._start(agent, inp, version)
        run.registered_attributes = frozenset(facts.attributes)
        if at_least(2):  # what the start request set is not upserted again
            run.sparse_attributes = True
            run.recorded_attributes = sa.values_of(workflow.info().typed_search_attributes)
        if inp.resume is not None:
            self.request_book.carried = inp.resume.chain
        if at_least(3):  # time travel (issue 22): state snapshots, a fork's lineage
            run.record_state = True
            run.recorded_state = dict(inp.resume.state) if inp.resume is not None else {}
            run.lineage, run.lineage_details = run_lineage()
        if at_least(4):  # the ledger (issue 29): counters in activity headers, the memo when due
            run.ledger_headers = True
            if inp.resume is None:
                run.recorded_counters = start_counters()
        run.confirm()
        if inp.resume is None:
            telemetry.run_started(agent.name)
            emit(EventType.RUN, agent=agent.name, model=run.model, streaming=run.settings.stream,  # streaming
                 prompt=None if inp.prompt is None else preview(prompt_text(inp.prompt)),
                 session=inp.session or None)
        try:
            with telemetry.agent_span(agent.name, run.run_id):
                output = await self._loop(run, inp)
            check_fits(_result(run, output), "the run's result")
        except RunFailure as failure:
            raise await self._end_stream(self._fail(run, failure)) from None
        except asyncio.CancelledError:  # Temporal's cancel (UI, CLI, client) while waiting
            raise await self._end_stream(
                self._fail(run, Cancelled("the run was cancelled by a client"))) from None
        except ValidationError as e:
            raise await self._end_stream(self._fail(run, InternalError(f"invalid value: {e}"))) from None
        except workflow.NondeterminismError:
            raise  # a code change the history does not match: fixed by deploying, not by failing
        except Exception as e:  # noqa: BLE001 - an engine bug: fail the run, never the task
            failure = InternalError(f"{type(e).__name__}: {e}")
            try:
                failure = self._fail(run, failure)
            except Exception as inner:  # noqa: BLE001 - not even the partial can be built
                workflow.logger.error("run failed without its partial: %s", inner)
            raise await self._end_stream(failure) from None
        run.confirm(RunStatus.SUCCEEDED)
        telemetry.run_ended(run.started_as, None)
        self._ended = True  # from here on `send` is refused: no answer would ever come
        emit(EventType.RESULT, output=output, counters=run.counters.model_dump(mode="json"))  # streaming
        await self.stream.close()  # streaming: subscribers' polls return before the run ends
        if at_least(5):  # a message it will not answer (queued as the session went idle) fails
            ended = f" (its session ended: {self.session_end})" if self.session_end else ""
            await self._close_sends("RunEnded", "the run completed before it answered this "
                                    f"message{ended}; start a new run with its messages as history")
        await workflow.wait_condition(workflow.all_handlers_finished)
        # engine 5: the result says how a session ended (by request, or idle)
        return _result(run, output, self.session_end if at_least(5) else None)

    def ledger_header(self) -> Payload | None:
        """Engine 4: the `towline.counters` header of an activity scheduled now, the counters
        the runtime has confirmed (`towline.runtime.ledger_headers`); None before."""
        run = self._run
        return run.header() if run is not None and run.ledger_headers else None

    async def _end_stream(self, failure: RunFailure) -> RunFailure:
        """Streaming: publish the failure and release subscribers before the run fails; engine
        5: fail the `send`s still waiting with it (`_close_sends`)."""
        emit(EventType.FAILED, reason=type(failure).__name__, message=failure.message)
        await self.stream.close()
        if at_least(5):  # a `send` waiting for an answer fails with the run's reason
            await self._close_sends(type(failure).__name__, failure.message)
        return failure

    def _resolve(self, args: Sequence[Any]) -> tuple[RunInput, Agent]:
        inp = decode_run_input(args)
        agent = self._worker().agent(inp.agent)
        queue = workflow.info().task_queue
        if agent is None:
            raise UnknownAgent(
                f"no agent named {inp.agent!r} is registered on {self._worker().described(queue)}"
                ": every worker polling a task queue must serve the same agents. Serve it there "
                f"(towline worker --agent MODULE:ATTR --task-queue {queue}), or start the run on "
                "a queue whose workers serve it (--task-queue; `towline run` without --task-queue "
                "and --no-worker runs it on a queue of its own)")
        if at_least(5):  # checked against every agent the run may become (`client_tools`)
            self._client_tools = run_client_tools(inp.client_tools, agent, self._worker())
        else:
            self._client_tools = client_tools(inp.client_tools, agent.inventory) if at_least(4) else []
        if at_least(5):  # engine 5: an unknown or ill-typed context key ends the run, named
            self._context = check_context(agent, inp.context)
        if inp.model is not None and not self._worker().model_allowed(inp.model, agent):
            raise InvalidRunInput(
                f"model {inp.model!r} is not allowed on {self._worker().described(queue)}: "
                "allow it there with --allow-model PATTERN (towline worker or towline dev) or "
                "TowlinePlugin(allowed_models=[...]), or start the run on a queue whose workers "
                "allow it (`towline run --model` without --task-queue and --no-worker runs it on "
                "a queue of its own, whose worker allows it)")
        return inp, agent

    def _worker(self) -> WorkerAgents:
        """This worker's agents (a worker without `TowlinePlugin` has none)."""
        return worker_agents() or WorkerAgents()

    def _agent_version(self, agent: Agent) -> str | None:
        """The agent version the run started with, recorded by a `workflow.patched` marker
        (`agent_versions.recorded_version`; None for a run from before versions)."""
        if not since(AGENT_VERSIONS):
            return None  # a run from before versions were recorded: nothing to compare
        return recorded_version(self._worker(), agent)

    def _fail_early(
        self, failure: RunFailure, registered: frozenset[str], agent: str | None
    ) -> RunFailure:
        """A run that never started (bad input, unknown agent) still records that it failed."""
        telemetry.run_ended(agent or "", type(failure).__name__)
        values: list[tuple[SearchAttributeKey[Any], Any]] = [(sa.STATUS, RunStatus.FAILED)]
        if agent is not None:
            values.append((sa.AGENT, agent))
        started = sa.values_of(workflow.info().typed_search_attributes) if at_least(2) else {}
        updates = [key.value_set(v) for key, v in values
                   if key.name in registered and started.get(key.name) != v]
        if updates:
            workflow.upsert_search_attributes(updates)  # pyright: ignore[reportUnknownMemberType]
        workflow.set_current_details(f"**failed** — {type(failure).__name__}: {failure.message}")
        return failure.with_partial(PartialRun(run_id=workflow.info().workflow_id))

    def _start(self, agent: Agent, inp: RunInput, version: str | None) -> Run:
        limits = inp.limits or agent.limits
        info = workflow.info()
        if inp.resume is not None:
            r = inp.resume
            self._inbox = list(r.inbox)
            counters = r.counters
            if version is not None:  # this execution's code: its version from here on
                counters = counters.model_copy(update={"agent_version": version})
            run = Run(agent=agent, run_id=r.root_run_id, limits=limits, messages=list(r.messages),
                      state=dict(r.state), counters=counters, usage=r.usage,
                      pending_approvals=dict(r.pending_approvals), recorded_counters=r.counters,
                      mcp_listings=dict(r.mcp_listings))
            restore_mcp_tools(run)
            restore_approvals(run, r.approvals)
            if at_least(5):  # the client's tools stay the run's as it goes on as the target
                run.client_tools = {t.name: t for t in self._client_tools}
            handoffs.resume(run, self._worker(), r.handoffs)  # as the agent last handed to
        else:
            state = agent.state_defaults()
            state.update({k: v for k, v in (inp.context or {}).items() if k in agent.state_schema})
            counters = Counters.starting(limits, version)
            run = Run(agent=agent, run_id=info.workflow_id, limits=limits, messages=[],
                      state=state, counters=counters)
            for m in inp.message_history or []:
                run.append(m)
            # a given history may end with calls that never returned: the run owns them now
            run.close_unpaired("not executed: the given history ended before it returned")
            if inp.prompt is not None:
                run.append(ModelRequest(parts=[UserPart(content=inp.prompt)]))
        run.tools.update({t.name: t for t in self._client_tools})  # engine 4: the client's
        run.context = self._context
        if inp.resume is not None and at_least(5):
            run.instructions = dict(inp.resume.instructions)
            run.guard_requests = inp.resume.guard_requests
        if at_least(5):
            run.client_tools = {t.name: t for t in self._client_tools}
            run.client_wait = inp.session_timeout if inp.session else None
        if inp.allowed_tools is not None:
            run.allowed_tools = frozenset(inp.allowed_tools)
        if inp.model is not None and not run.handoffs:  # the first agent's, not its targets'
            run.model = inp.model
        run.settings = run.agent.settings
        if inp.stream is not None:  # streaming: the run's choice over the agent's
            run.settings = run.settings.model_copy(update={"stream": inp.stream})
        return run

    async def _worker_facts(self, args: Sequence[Any]) -> WorkerFacts:
        """Registered attributes, payload limit and model routes (`facts.worker_facts`)."""
        return await worker_facts(args)

    def _fail(self, run: Run, failure: RunFailure) -> RunFailure:
        run.close_unpaired(f"not executed: the run failed ({type(failure).__name__})")
        run.merge_reported_usage()
        run.pending_approvals.clear()
        run.confirm(RunStatus.FAILED)
        telemetry.run_ended(run.started_as, type(failure).__name__)
        return failure.with_partial(run.fitted_partial())

    async def _loop(self, run: Run, inp: RunInput) -> Any:
        # engine 4: a session's message sent mid-turn waits its turn, unless it interrupts
        queues = inp.session and at_least(4) and inp.on_busy != "interrupt"
        self.interruptible = inp.session and at_least(4) and inp.on_busy == "interrupt"
        turn_start = True
        while True:
            self._check_cancelled()
            if turn_start or not queues:
                self._drain_inbox(run)
            turn_start = False
            limits = run.limits
            if run.counters.run_step >= limits.max_steps:
                raise MaxStepsExceeded(
                    f"max_steps {limits.max_steps} reached after {run.counters.run_step} requests"
                )
            if limits.request_limit is not None and run.requests_paid() >= limits.request_limit:
                raise UsageLimitExceeded(f"request_limit {limits.request_limit} reached")
            run.check_spend()  # e.g. tools' usage
            if self._should_continue_as_new(run, inp):
                await self._continue_as_new(run, inp)
            step = run.counters.run_step + 1
            emit(EventType.STEP, step=step, model=run.model)  # streaming
            with telemetry.turn_span(run.agent.name, step):
                await refresh_mcp_tools(run)
                if at_least(5):  # engine 5: an instructions function, once per run and agent
                    await resolve_instructions(run)
                try:
                    outcome = await run_turn(run, step)
                except Interrupted:  # the request counts; the new message joins the next one
                    run.bump(requests=run.counters.requests + 1)
                    emit(EventType.INTERRUPTED, step=step)
                    continue
                except GuardrailTripped as trip:  # engine 5: in a session, maybe the turn's end
                    output = refused_turn(run, trip, step) if inp.session and at_least(5) else None
                    if output is None:
                        raise
                else:
                    emit_response(step, outcome.response)  # streaming
                    run.check_spend()
                    output = await self._route(run, outcome)
            if output is CONTINUE:
                continue
            turn_start = True
            self._answers.append((self._consumed, output))
            forget_turn(run)  # decisions remembered for the `run` end with its answer
            if inp.session:  # streaming
                emit(EventType.ANSWER, output=output)
            if not self._inbox and not await self._next_session_message(run, inp):
                return output

    async def _route(self, run: Run, outcome: TurnOutcome) -> Any:
        """Tools, output or another turn; returns the final output, or `CONTINUE` to go on."""
        response, jump = outcome.response, outcome.jump
        calls = response.tool_calls
        structured = bool(outcome.output_tools) and run.agent.output_adapter is not None
        output_calls = [c for c in calls if c.tool_name == OUTPUT_TOOL_NAME and structured]
        function_calls = [c for c in calls if c not in output_calls]
        if calls and jump != "end" and not any(m.id == response.id for m in reversed(run.messages)):
            return CONTINUE  # an after_model hook removed the response, and its calls with it
        if jump in ("end", "model") or (jump == "tools" and not function_calls):
            run.close_unpaired(f"not executed: after_model jumped to {jump!r}")
            run.confirm()
            return CONTINUE if jump == "model" else jumped_output(run, response)
        if response.finish_reason in UNUSABLE and at_least(4):  # filtered, refused, malformed
            return unusable_answer(run, response)
        if output_calls and jump != "tools":
            if response.finish_reason == "length" and since(TRUNCATED_OUTPUT):
                run.close_unpaired("the response was cut off by the token limit: nothing was executed")
                run.confirm()
                return CONTINUE
            return structured_output(run, output_calls[0])
        if function_calls:
            await run_tool_calls(run, run.agent.capabilities, function_calls, outcome.executable,
                                 run.counters.run_step, truncated=response.finish_reason == "length")
            # an output call passed over by a "tools" jump still gets its one return record
            run.close_unpaired("not executed: after_model jumped to 'tools'")
            await handoffs.complete(run, self._worker())  # a handoff the calls asked for
            return CONTINUE
        return text_output(run, response)

    def _should_continue_as_new(self, run: Run, inp: RunInput) -> bool:
        # Not while a handler (a `send` waiting for its answer) is in flight: it
        # would wait for an answer only this execution can give. Streaming: a subscriber's
        # poll waiting for events is no such handler (`_continue_as_new` releases it).
        idle = workflow.all_handlers_finished() or (self.stream.polls > 0 and self._sends == 0)
        return should_continue(run, inp, idle=idle)

    async def _continue_as_new(self, run: Run, inp: RunInput) -> NoReturn:
        await self.stream.close()  # streaming: subscribers poll the next execution
        carried = carried_input(run, inp, inbox=self._inbox, facts=self._facts,
                                chain=self.request_book.last_chain(), stream=self.stream.carried())
        self._released = release(run, self.request_book, inp)
        workflow.continue_as_new(carried, memo={MEMO_KEY: to_proto(run.counters),
                                                **(run.carried_memo() if at_least(3) else {})})
