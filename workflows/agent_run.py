"""The `AgentRun` workflow: a durable agent run.

Each turn (`turn.run_turn`) makes one model request through the hooks; the
admitted tool calls then execute as activities (`tool_exec`). The run ends with
a final output, or fails with a non-retryable `RunFailure` whose details carry
the partial run. Queries `state`/`messages`, the update `send` and the signals
`cancel`/`end` (the session, `handlers`), and the decision updates `approve`/`reject` ... (the
approvals desk, `approval_updates`) make it inspectable and steerable while it runs: the
handlers are `AgentRun`'s (Temporal's rule) and hand the work to the part that owns it.
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
from towline.messages import MESSAGES, ModelRequest, ModelResponse, UserPart, prompt_text
from towline.results import (
    Counters,
    PartialRun,
    RunInput,
    RunResult,
    RunStatus,
    StateQueryResult,
    WorkerFacts,
)
from towline.runtime import search_attributes as sa
from towline.runtime.registry import WorkerAgents, worker_agents
from towline.runtime.request_chain import REQUEST_INPUT_QUERY, RequestBook, RequestQuery
from towline.runtime.request_refs import REQUEST_QUERY
from towline.telemetry import tracing as telemetry
from towline.timetravel.lineage import run_lineage

from . import handoffs
from .agent_versions import recorded_version
from .approval_updates import ApprovalDesk
from .approvals import forget_turn, restore_approvals
from .client_tools import run_client_tools
from .continuation import carried_input, check_fits, release, should_continue
from .conversation import Conversation
from .events import RunStream, emit, emit_response, prior_stream_state
from .facts import worker_facts
from .finish import UNUSABLE, unusable_answer
from .handlers import SendInput, Session, run_state
from .hook_api import ApprovalDecision, HookApi
from .instructions import resolve_instructions
from .inventory import Inventory
from .ledger import Ledger, start_counters
from .mcp_tools import refresh_mcp_tools, restore_mcp_tools
from .output import CONTINUE, jumped_output, structured_output, text_output
from .refusals import refused_turn
from .run import Run
from .run_context import check_context
from .run_input import agent_named_in, decode_run_input
from .steering import Interrupted, Steering
from .tool_exec import run_tool_calls
from .turn import TurnOutcome, run_turn
from .versions import engine
from .waiting import Approvals

__all__ = ["AgentRun", "ApprovalDecision", "SendInput"]


def _result(run: Run, output: Any, session_end: Any = None) -> RunResult:
    return RunResult(
        output=output, messages=run.conversation.messages, usage=run.ledger.usage, counters=run.ledger.counters,
        state=run.state, run_id=run.run_id, handoffs=run.handoffs, session_end=session_end,
    )


@workflow.defn(name="AgentRun", sandboxed=False)
class AgentRun:
    """Runs one agent to a final output (docs/design.md says why it works as it does). It runs outside
    Temporal's sandbox, which restricted nothing in towline's passed-through code but cost a
    fifth of the worker's CPU; user hook code keeps its watch (docs/design.md)."""

    @workflow.init
    def __init__(self, *args: Any) -> None:
        # streaming: the run's live events (`towline.events`); built here, as Temporal requires
        self.stream = RunStream(prior_stream_state(args))
        self._run: Run | None = None
        self.steering = Steering()
        """A cancel, an interrupting `send`: what the handlers tell the running code
        (`Run.steering`)."""
        self.session = Session(self.steering)
        """The run's session with its client: `send`, `end`, `cancel`, the inbox and answers."""
        self.approvals = ApprovalDesk(self.steering)
        """The run's decisions: the gate, the waits and the decision updates' work."""
        self._client_tools: list[Any] = []
        self.request_book = RequestBook()
        self._facts = WorkerFacts()
        self.dispatch = Dispatch()
        """Fleet: the run's model routes and priority (`Run.dispatch`; the hook context's child runs
        take it from `HookApi`)."""
        self.hooks = HookApi(self.stream, self.approvals, self.dispatch)
        """What hook code acts on (`towline.hook_context()`)."""
        self._released = False
        self._context: Any = None  # the run's typed context (`check_context`)

    @workflow.run
    async def run(self, *args: Any) -> RunResult:
        from . import scope  # what this run awaits finds it there (`towline.hooks`)

        scope.enter(self)
        scope.enter_hooks(self.hooks)
        # The input is taken untyped and decoded here (see `towline.runtime.converter`): input that
        # does not decode must end the run with InvalidRunInput, not fail the workflow
        # task, which Temporal would retry forever with the run stuck.
        engine(self)  # the engine-version marker (none in 1.0) comes first (see `versions`)
        # Resolving emits no command. The agent version's `workflow.patched` marker comes
        # before the worker-facts local activity: a query reaching the first workflow task
        # could otherwise split the two across tasks, which a replay would not match.
        try:
            inp, agent = self._resolve(args)
        except RunFailure as failure:
            facts = await self._worker_facts(args)
            raise await self._end_stream(self._fail_early(
                failure, frozenset(facts.attributes), agent_named_in(args))) from None
        version = recorded_version(self._worker(), agent)
        facts = await self._worker_facts(args)
        self._facts = facts
        self.session.payload_limit = facts.payload_limit  # the `send` validator's, and `Run`'s
        self.session.on_busy = inp.on_busy if inp.session else "queue"
        # fleet: model routes as the run's worker reported them, priority
        self.dispatch = self.hooks.dispatch = Dispatch.of(facts.model_queues, inp.priority, inp.tenant)
        run = self._run = self._start(agent, inp, version)
        self.approvals.run = self.session.run = self.hooks.run = run  # the parts' state
        # the run's own objects travel with it, handed to the turn, the model and tool calls
        run.stream, run.steering, run.request_book = self.stream, self.steering, self.request_book
        run.dispatch, run.payload_limit = self.dispatch, facts.payload_limit
        scope.enter_state(run)  # for what no caller hands it to (a hook's own `call_model`)
        run.ledger.registered_attributes = frozenset(facts.attributes)
        # what the start request set is not upserted again
        run.ledger.recorded_attributes = sa.values_of(workflow.info().typed_search_attributes)
        if inp.resume is not None:
            self.request_book.carried = inp.resume.chain
        # time travel: state snapshots, a fork's lineage
        run.ledger.recorded_state = dict(inp.resume.state) if inp.resume is not None else {}
        run.ledger.lineage, run.ledger.lineage_details = run_lineage()
        if inp.resume is None:  # the ledger: what the start request's memo already holds
            run.ledger.recorded_counters = start_counters()
        run.ledger.confirm()
        if inp.resume is None:
            telemetry.run_started(agent.name)
            emit(run.stream, EventType.RUN, agent=agent.name, model=run.model,  # streaming
                 streaming=run.settings.stream,
                 prompt=None if inp.prompt is None else preview(prompt_text(inp.prompt)),
                 session=inp.session or None)
        try:
            with telemetry.agent_span(agent.name, run.run_id):
                output = await self._loop(run, inp)
            check_fits(_result(run, output), "the run's result", run.payload_limit)
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
        run.ledger.confirm(RunStatus.SUCCEEDED)
        telemetry.run_ended(run.started_as, None)
        self.session.ended = True  # from here on `send` is refused: no answer would ever come
        emit(run.stream, EventType.RESULT, output=output,  # streaming
             counters=run.ledger.counters.model_dump(mode="json"))
        await self.stream.close()  # streaming: subscribers' polls return before the run ends
        # a message it will not answer (queued as the session went idle) fails
        session_end = self.session.session_end
        ended = f" (its session ended: {session_end})" if session_end else ""
        await self.session.close_sends("RunEnded", "the run completed before it answered this "
                                f"message{ended}; start a new run with its messages as history")
        await workflow.wait_condition(workflow.all_handlers_finished)
        # the result says how a session ended (by request, or idle)
        return _result(run, output, session_end)

    def ledger_header(self) -> Payload | None:
        """The `towline.counters` header of an activity scheduled now, the counters the runtime
        has confirmed (`towline.runtime.ledger_headers`); None before the run has started."""
        run = self._run
        return run.ledger.header() if run is not None else None

    # --- the session (`handlers`) and the queries -------------------------------------------

    @workflow.update
    async def send(self, message: Any) -> Any:
        """Queue the next user message (a `SendInput`, decoded by the validator); returns the
        answer the run gives to it."""
        return await self.session.send(message)

    @send.validator
    def _validate_send(self, message: Any) -> None:
        self.session.validate_send(message)

    @workflow.signal
    def cancel(self) -> None:
        """Cancel the run at its next step boundary (or while it waits): it fails `Cancelled`."""
        self.session.cancel()

    @workflow.signal
    def end(self) -> None:
        """End a session once it has answered what it was sent: it completes with that answer."""
        self.session.end()

    @workflow.query
    def state(self) -> StateQueryResult:
        """The active agent, counters, status (and what a waiting run waits for), pending
        approvals and client tool calls, contributed state, usage, the run's approval policy,
        remembered decisions, the audit trail and the handoffs so far."""
        return run_state(self._run)

    @workflow.query(name=REQUEST_INPUT_QUERY)
    def request_input(self, query: RequestQuery) -> str:
        """An in-flight model request's messages (after a key the worker holds) and
        definitions, as JSON: what a model activity's worker lacks (`towline.runtime.request_chain`)."""
        return self.request_book.answer(query).model_dump_json()

    @workflow.query(name=REQUEST_QUERY)
    def request_messages(self, key: str) -> str:
        """The full messages of an in-flight model request, as JSON (the earlier protocol's
        query, for activities scheduled by earlier code)."""
        pending = self.request_book.pending.get(int(key)) if key.isdigit() else None
        if pending is None:
            raise ValueError(f"no model request {key!r} is in flight")
        return MESSAGES.dump_json(pending.messages).decode()

    @workflow.query
    def messages(self) -> list[ModelRequest | ModelResponse]:
        """The canonical history so far."""
        if self._released:  # never an empty answer that looks like a conversation
            raise ValueError("this execution has continued as new: its conversation is in the "
                             "next execution (query the workflow without a run id)")
        return list(self._run.conversation.messages) if self._run else []

    # --- decisions: the approvals desk's updates (`approval_updates`) ------------------------

    @workflow.update
    async def approve(self, decision: Any) -> str:
        """Approve a waiting tool call (an `ApprovalDecision`)."""
        return self.approvals.approve(decision)

    @workflow.update
    async def reject(self, decision: Any) -> str:
        """Reject a waiting tool call (recorded `denied`; the model is told)."""
        return self.approvals.reject(decision)

    @workflow.update
    async def edit(self, decision: Any) -> str:
        """Approve a waiting tool call with other arguments (an `EditDecision`; both recorded)."""
        return self.approvals.edit(decision)

    @workflow.update
    async def respond(self, decision: Any) -> str:
        """Give a waiting call its return without running the tool (a `RespondDecision`), or a
        client tool's call its result."""
        return self.approvals.respond(decision)

    @workflow.update
    async def decide(self, batch: Any) -> list[dict[str, Any]]:
        """Several decisions at once (`Decisions`), applied together; their audit entries."""
        return self.approvals.decide(batch)

    @workflow.update
    async def tool_result(self, result: Any) -> str:
        """The result of a pending client tool call (a `ToolResultInput`), or its error or a
        retry request."""
        return self.approvals.tool_result(result)

    @workflow.update
    async def set_policy(self, update: Any) -> dict[str, Any]:
        """Change the run's own approval rules (a `PolicyUpdate`); calls waiting now are
        answered by them too. Returns the run's policy. An update that leaves the policy as it
        was is not recorded in the audit trail."""
        return self.approvals.set_policy(update)

    @approve.validator
    def _validate_approve(self, decision: Any) -> None:
        self.approvals.validate_approve(decision)

    @reject.validator
    def _validate_reject(self, decision: Any) -> None:
        self.approvals.validate_reject(decision)

    @edit.validator
    def _validate_edit(self, decision: Any) -> None:
        self.approvals.validate_edit(decision)

    @respond.validator
    def _validate_respond(self, decision: Any) -> None:
        self.approvals.validate_respond(decision)

    @decide.validator
    def _validate_decide(self, batch: Any) -> None:
        self.approvals.validate_decide(batch)

    @tool_result.validator
    def _validate_tool_result(self, result: Any) -> None:
        self.approvals.validate_tool_result(result)

    @set_policy.validator
    def _validate_set_policy(self, update: Any) -> None:
        self.approvals.validate_set_policy(update)

    async def _end_stream(self, failure: RunFailure) -> RunFailure:
        """Streaming: publish the failure and release subscribers before the run fails; fail
        the `send`s still waiting with it (`Session.close_sends`)."""
        emit(self.stream, EventType.FAILED, reason=type(failure).__name__, message=failure.message)
        await self.stream.close()
        await self.session.close_sends(type(failure).__name__, failure.message)
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
        # checked against every agent the run may become (`client_tools`)
        self._client_tools = run_client_tools(inp.client_tools, agent, self._worker())
        # an unknown or ill-typed context key ends the run, named
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

    def _fail_early(
        self, failure: RunFailure, registered: frozenset[str], agent: str | None
    ) -> RunFailure:
        """A run that never started (bad input, unknown agent) still records that it failed."""
        telemetry.run_ended(agent or "", type(failure).__name__)
        values: list[tuple[SearchAttributeKey[Any], Any]] = [(sa.STATUS, RunStatus.FAILED)]
        if agent is not None:
            values.append((sa.AGENT, agent))
        started = sa.values_of(workflow.info().typed_search_attributes)
        updates = [key.value_set(v) for key, v in values
                   if key.name in registered and started.get(key.name) != v]
        if updates:
            workflow.upsert_search_attributes(updates)  # pyright: ignore[reportUnknownMemberType]
        workflow.set_current_details(f"**failed** — {type(failure).__name__}: {failure.message}")
        return failure.with_partial(PartialRun(run_id=workflow.info().workflow_id))

    def _start(self, agent: Agent, inp: RunInput, version: str) -> Run:
        limits = inp.limits or agent.limits
        info = workflow.info()
        if inp.resume is not None:
            r = inp.resume
            self.session.inbox = list(r.inbox)
            counters = r.counters
            # this execution's code: its version from here on
            counters = counters.model_copy(update={"agent_version": version})
            run = Run(agent=agent, run_id=r.root_run_id, limits=limits,
                      conversation=Conversation(list(r.messages)),
                      state=dict(r.state),
                      ledger=Ledger(counters, usage=r.usage, recorded_counters=r.counters,
                                    guard_requests=r.guard_requests),
                      approvals=Approvals(pending=dict(r.pending_approvals)),
                      inventory=Inventory(mcp_listings=dict(r.mcp_listings)))
            restore_mcp_tools(run)
            restore_approvals(run, r.approvals)
            # the client's tools stay the run's as it goes on as the target
            run.inventory.client_tools = {t.name: t for t in self._client_tools}
            handoffs.resume(run, self._worker(), r.handoffs)  # as the agent last handed to
        else:
            state = agent.state_defaults()
            state.update({k: v for k, v in (inp.context or {}).items() if k in agent.state_schema})
            counters = Counters.starting(limits, version)
            run = Run(agent=agent, run_id=info.workflow_id, limits=limits, conversation=Conversation(),
                      state=state, ledger=Ledger(counters))
            for m in inp.message_history or []:
                run.conversation.append(m)
            # a given history may end with calls that never returned: the run owns them now
            run.conversation.close_unpaired("not executed: the given history ended before it returned")
            if inp.prompt is not None:
                run.conversation.append(ModelRequest(parts=[UserPart(content=inp.prompt)]))
        run.inventory.tools.update({t.name: t for t in self._client_tools})  # the client's
        run.context = self._context
        if inp.resume is not None:
            run.instructions = dict(inp.resume.instructions)
        run.inventory.client_tools = {t.name: t for t in self._client_tools}
        run.inventory.client_wait = inp.session_timeout if inp.session else None
        if inp.allowed_tools is not None:
            run.inventory.allowed_tools = frozenset(inp.allowed_tools)
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
        run.conversation.close_unpaired(f"not executed: the run failed ({type(failure).__name__})")
        run.ledger.merge_reported_usage()
        run.approvals.pending.clear()
        run.ledger.confirm(RunStatus.FAILED)
        telemetry.run_ended(run.started_as, type(failure).__name__)
        return failure.with_partial(run.fitted_partial())

    async def _loop(self, run: Run, inp: RunInput) -> Any:
        # a session's message sent mid-turn waits its turn, unless it interrupts
        queues = inp.session and inp.on_busy != "interrupt"
        run.steering.interruptible = inp.session and inp.on_busy == "interrupt"
        turn_start = True
        while True:
            self.steering.check_cancelled()
            if turn_start or not queues:
                self.session.drain_inbox(run)
            turn_start = False
            limits = run.limits
            if run.ledger.counters.run_step >= limits.max_steps:
                raise MaxStepsExceeded(
                    f"max_steps {limits.max_steps} reached after {run.ledger.counters.run_step} requests"
                )
            if limits.request_limit is not None and run.ledger.requests_paid() >= limits.request_limit:
                raise UsageLimitExceeded(f"request_limit {limits.request_limit} reached")
            run.ledger.check_spend()  # e.g. tools' usage
            if self._should_continue_as_new(run, inp):
                await self._continue_as_new(run, inp)
            step = run.ledger.counters.run_step + 1
            emit(run.stream, EventType.STEP, step=step, model=run.model)  # streaming
            with telemetry.turn_span(run.agent.name, step):
                await refresh_mcp_tools(run)
                await resolve_instructions(run)  # an instructions function, once per run and agent
                try:
                    outcome = await run_turn(run, step)
                except Interrupted:  # the request counts; the new message joins the next one
                    run.ledger.bump(requests=run.ledger.counters.requests + 1)
                    emit(run.stream, EventType.INTERRUPTED, step=step)
                    continue
                except GuardrailTripped as trip:  # in a session, maybe the turn's end
                    output = refused_turn(run, trip, step) if inp.session else None
                    if output is None:
                        raise
                else:
                    emit_response(run.stream, step, outcome.response)  # streaming
                    run.ledger.check_spend()
                    output = await self._route(run, outcome)
            if output is CONTINUE:
                continue
            turn_start = True
            self.session.answered(output)
            forget_turn(run)  # decisions remembered for the `run` end with its answer
            if inp.session:  # streaming
                emit(run.stream, EventType.ANSWER, output=output)
            if not self.session.inbox and not await self.session.next_message(run, inp):
                return output

    async def _route(self, run: Run, outcome: TurnOutcome) -> Any:
        """Tools, output or another turn; returns the final output, or `CONTINUE` to go on."""
        response, jump = outcome.response, outcome.jump
        calls = response.tool_calls
        structured = bool(outcome.output_tools) and run.agent.output_adapter is not None
        output_calls = [c for c in calls if c.tool_name == OUTPUT_TOOL_NAME and structured]
        function_calls = [c for c in calls if c not in output_calls]
        messages = run.conversation.messages
        if calls and jump != "end" and not any(m.id == response.id for m in reversed(messages)):
            return CONTINUE  # an after_model hook removed the response, and its calls with it
        if jump in ("end", "model") or (jump == "tools" and not function_calls):
            run.conversation.close_unpaired(f"not executed: after_model jumped to {jump!r}")
            run.ledger.confirm()
            return CONTINUE if jump == "model" else jumped_output(run, response)
        if response.finish_reason in UNUSABLE:  # filtered, refused, malformed
            return unusable_answer(run, response)
        if output_calls and jump != "tools":
            if response.finish_reason == "length":
                run.conversation.close_unpaired(
                    "the response was cut off by the token limit: nothing was executed")
                run.ledger.confirm()
                return CONTINUE
            return structured_output(run, output_calls[0])
        if function_calls:
            await run_tool_calls(run, run.agent.capabilities, function_calls, outcome.executable,
                                 run.ledger.counters.run_step, truncated=response.finish_reason == "length",
                                 client=self.approvals)
            # an output call passed over by a "tools" jump still gets its one return record
            run.conversation.close_unpaired("not executed: after_model jumped to 'tools'")
            await handoffs.complete(run, self._worker())  # a handoff the calls asked for
            return CONTINUE
        return text_output(run, response)

    def _should_continue_as_new(self, run: Run, inp: RunInput) -> bool:
        # Not while a handler (a `send` waiting for its answer) is in flight: it
        # would wait for an answer only this execution can give. Streaming: a subscriber's
        # poll waiting for events is no such handler (`_continue_as_new` releases it).
        idle = workflow.all_handlers_finished() or (self.stream.polls > 0 and self.session.sends == 0)
        return should_continue(run, inp, idle=idle)

    async def _continue_as_new(self, run: Run, inp: RunInput) -> NoReturn:
        await self.stream.close()  # streaming: subscribers poll the next execution
        carried = carried_input(run, inp, inbox=self.session.inbox, facts=self._facts,
                                chain=self.request_book.last_chain(), stream=self.stream.carried())
        self._released = release(run, self.request_book, inp)
        workflow.continue_as_new(carried, memo=run.ledger.carried_memo())
