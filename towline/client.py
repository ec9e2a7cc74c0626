"""Thin helpers over `temporalio.client.Client`: connect, start a run, run to the end, and
`RunHandle`, a typed handle on one run (its state, pending calls, decisions, messages, events).

Connection settings come from Temporal's environment configuration
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, profiles in `temporal.toml`, TLS and
API keys), defaulting to the embedded dev server on localhost:7233.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from temporalio.client import (
    Client,
    Plugin,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import TypedSearchAttributes, WorkerDeploymentVersion, WorkflowIDReusePolicy
from temporalio.envconfig import ClientConfigProfile
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from towline.agent import Agent
from towline.encryption.codec import EncryptionCodec
from towline.errors import RunEnded, RunError, failed_run
from towline.events import EVENTS_TOPIC, RunEvent
from towline.fleet.routing import ModelRoutes, run_priority
from towline.messages import Message, UserContent, prompt_text
from towline.models import Model
from towline.options import Limits
from towline.results import (
    ClientToolSpec,
    Counters,
    PartialRun,
    PendingApproval,
    RunInput,
    RunResult,
    StateQueryResult,
)
from towline.review.delivery import ACCEPT_WAIT, deliver
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import MEMO_KEY, to_proto
from towline.runtime.plugin import TowlinePlugin
from towline.runtime.queues import (
    DEFAULT_TASK_QUEUE,
    OWN_QUEUE_PREFIX,
    is_own_queue,
    own_task_queue,
)
from towline.runtime.registration import unregistered_attribute
from towline.runtime.search_attributes import start_attributes
from towline.storage.payload_store import PayloadStore

if TYPE_CHECKING:  # imported on first use (`__getattr__`): the client stays light
    from towline.fleet.schedules import create_schedule
    from towline.timetravel.travel import fork
    from towline.workflows import AgentRun
    from towline.workflows.decisions import (
        ApprovalDecision,
        Decisions,
        EditDecision,
        PolicyUpdate,
        RespondDecision,
        ToolResultInput,
    )

__all__ = ["RunHandle", "run_handle", "connect", "connect_config", "with_towline", "start_run", "run", "run_error",
           "send", "ended_run", "ended_by", "typed_output", "events", "create_schedule", "fork", "DEFAULT_ADDRESS", "DEFAULT_TASK_QUEUE",
           "OWN_QUEUE_PREFIX", "own_task_queue", "is_own_queue"]

DEFAULT_ADDRESS = "localhost:7233"
def connect_config(address: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """Keyword arguments for `Client.connect` from environment configuration (and overrides)."""
    config: dict[str, Any] = dict(ClientConfigProfile.load().to_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    return config


async def connect(
    address: str | None = None,
    namespace: str | None = None,
    *,
    agents: Sequence[Agent] = (),
    models: dict[str, Model] | None = None,
    encryption: EncryptionCodec | None = None,
    plugins: Sequence[Plugin] = (),
    payload_store: PayloadStore | str | None = None,
) -> Client:
    """Connect with towline's plugin (data converter; agents for workers built from it).

    `encryption` encrypts payloads (`towline.encryption.codec`); `payload_store` keeps large
    payloads out of the history (`towline.storage.payload_store`); `plugins` go before towline's
    (e.g. `towline.observability.tracing_plugin()`).
    """
    return await Client.connect(
        **connect_config(address, namespace),
        plugins=[*plugins, TowlinePlugin(agents, models, encryption=encryption,
                                         payload_store=payload_store)],
    )


def with_towline(
    client: Client,
    agents: Sequence[Agent] = (),
    models: Mapping[str, Model] | None = None,
    *,
    allowed_models: Sequence[str] = (),
    encryption: EncryptionCodec | None = None,
    plugins: Sequence[Plugin] = (),
    deployment: WorkerDeploymentVersion | None = None,
    accept_versions: Sequence[str] = (),
    payload_store: PayloadStore | str | None = None,
    model_queues: ModelRoutes | None = None,
    deps: Any = None,
) -> Client:
    """A client sharing `client`'s connection, with towline's plugin (and converter) for `agents`.

    A `TowlinePlugin` the client already carries is replaced, not joined: two would
    register every activity twice and the worker would refuse to start. Its
    encryption and payload store are kept unless others are given; `plugins` are added
    before it. `deployment`, `accept_versions` and `model_queues` are `TowlinePlugin`'s, for
    workers built from it (model queues are kept too unless others are given). `deps`: the
    worker-side dependencies its workers hand to tools and activities (kept too unless given).
    """
    config = client.config()
    existing = list(config.get("plugins", []))
    for p in existing:
        if isinstance(p, TowlinePlugin):
            encryption = encryption if encryption is not None else p.encryption
            payload_store = payload_store if payload_store is not None else p.payload_store
            model_queues = model_queues if model_queues is not None else p.model_queues
            deps = deps if deps is not None else p.deps
    others = [p for p in existing if not isinstance(p, TowlinePlugin)]
    config["plugins"] = [*others, *plugins,
                         TowlinePlugin(agents, dict(models or {}), allowed_models=allowed_models,
                                       encryption=encryption, deployment=deployment,
                                       accept_versions=accept_versions, payload_store=payload_store,
                                       model_queues=model_queues, deps=deps)]
    return Client(**config)


async def start_run(
    client: Client,
    agent: str | Agent,
    prompt: str | Sequence[UserContent] | None,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    id: str | None = None,
    limits: Limits | None = None,
    message_history: list[Message] | None = None,
    context: dict[str, Any] | None = None,
    session: bool = False,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    model: str | None = None,
    stream: bool | None = None,
    priority: int | None = None,
    tenant: str | None = None,
    client_tools: Sequence[ClientToolSpec] | None = None,
    on_busy: Literal["queue", "interrupt", "reject"] = "queue",
    session_timeout: timedelta | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start an `AgentRun`; returns its handle.

    `id_reuse_policy` is Temporal's: whether `id` may name a new run after a closed one
    (a live run with that id always makes this raise `WorkflowAlreadyStartedError`).
    `model` runs the agent on another model (one the worker allows, see
    `TowlinePlugin(allowed_models=...)`). `stream` streams the model's text to the run's
    live events (`events`) or not, whatever the agent's `ModelSettings.stream` says.
    `priority` (1 first ... 5 last) and `tenant` are Temporal's priority and fairness keys,
    for the run and everything it schedules (`towline.fleet.routing`). `client_tools` are
    tools the client runs, offered beside the agent's (their results: `towline.review`).
    `on_busy`: what a session's `send` does while a turn runs (`RunInput.on_busy`).
    `session_timeout`: how long a session waits for its next message, or a client tool's
    result (None: `RunInput`'s default, an hour).
    """
    name = agent.name if isinstance(agent, Agent) else agent
    timeout: dict[str, Any] = {} if session_timeout is None else {"session_timeout": session_timeout}
    inp = RunInput(agent=name, prompt=prompt if prompt is None or isinstance(prompt, str)
                   else list(prompt), message_history=message_history, limits=limits,
                   context=context, session=session, model=model, stream=stream,
                   priority=priority, tenant=tenant,
                   client_tools=list(client_tools) if client_tools else None, on_busy=on_busy,
                   **timeout)
    workflow_id = id or f"{_id_prefix(name)}-{_suffix()}"

    version = agent_version(agent) if isinstance(agent, Agent) else None
    # The visible counters a new run starts with (the run writes its memo only where they
    # differ): known when the agent itself is given.
    memo = ({MEMO_KEY: to_proto(Counters.starting(limits or agent.limits, version))}
            if isinstance(agent, Agent) else None)

    async def start(attributes: TypedSearchAttributes | None) -> WorkflowHandle[Any, RunResult]:
        return await client.start_workflow(
            "AgentRun", inp, id=workflow_id, task_queue=task_queue, result_type=RunResult,
            id_reuse_policy=id_reuse_policy, search_attributes=attributes, memo=memo,
            static_summary=f"{name}: {prompt_text(prompt or '')[:80]}",
            priority=run_priority(priority, tenant),
        )

    # The agent, its version, status and Int counters go in the start request, where they are
    # not billed; the run upserts only what differs. A namespace that has not registered
    # them refuses the start (nothing started): start again without, the run upserts those
    # it finds registered.
    try:
        return await start(start_attributes(name, version))
    except RPCError as e:
        if not unregistered_attribute(e):
            raise
    return await start(None)


_ELSEWHERE = {"fork": "towline.timetravel.travel", "create_schedule": "towline.fleet.schedules"}
"""Helpers this module offers that live with what they need (time travel reads a run's history,
schedules talk to Temporal Schedules): imported on first use, so `towline.client` stays light."""


def __getattr__(name: str) -> Any:
    """`fork` (`towline.timetravel.travel.fork`) and `create_schedule`
    (`towline.fleet.schedules.create_schedule`), imported when first used."""
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _id_prefix(name: str) -> str:
    """The start of a new run's workflow id for an agent named `name`: the name with each run of
    characters other than letters, digits, `.`, `_` and `-` made one `-` ("Triage Agent" ->
    `Triage-Agent`), so that an id never holds a space a shell or a URL would have to quote."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


def _suffix() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


def run_error(err: WorkflowFailureError) -> RunError:
    """The `RunError` for a failed run's `WorkflowFailureError`: also an instance of the
    failure's own class (`MaxStepsExceeded`, `GuardrailTripped`, ...) when towline defines
    it (`towline.errors.failed_run`), else a plain `RunError`."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        partial = None
        if cause.details:
            try:
                partial = PartialRun.model_validate(cause.details[0])
            except Exception:  # noqa: BLE001 - malformed details: report the failure without a partial
                partial = None
        return failed_run(cause.type or "ApplicationError", cause.message, partial)
    return RunError(type(cause).__name__, str(cause), None)


async def ended_run(handle: WorkflowHandle[Any, Any]) -> RunEnded | None:
    """`RunEnded` for the run of `handle` when it has ended (read with describe, and for a run
    that did not complete, its result: the failure's reason, message and partial run); None
    while it runs."""
    desc = await handle.describe()
    if desc.status in (None, WorkflowExecutionStatus.RUNNING):
        return None
    status = desc.status.name
    if desc.status in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.CONTINUED_AS_NEW):
        return RunEnded(status, status, f"run {handle.id!r} has ended ({status}): it takes no "
                        "more messages; start a new run with its messages as history")
    try:
        await handle.result(follow_runs=False)
    except WorkflowFailureError as e:
        err = run_error(e)
        return RunEnded(status, err.reason, err.message, err.partial)
    except RPCError:  # its result is gone (retention): the status says enough
        pass
    return RunEnded(status, status, f"run {handle.id!r} has ended ({status})")


async def send(handle: WorkflowHandle[Any, Any], content: str | Sequence[UserContent], *,
               wait: float | None = ACCEPT_WAIT) -> Any:
    """Send the next user message to a run (a session's `send` update) and return its answer.

    `RunEnded` when the run had ended, or ended before it answered (a guardrail tripped on the
    message, say): its status, reason (`GuardrailTripped`, naming the guardrail in the message)
    and partial run. `DecisionPending` / `DecisionNotDelivered` when no worker takes the message
    within `wait` seconds (`towline.review.delivery`); `WorkflowUpdateFailedError` when the run
    refuses it (an empty message, a busy run with `on_busy="reject"`, one too large).
    """
    from towline.workflows.handlers import SendInput

    message = SendInput(content=content if isinstance(content, str) else list(content))
    try:
        return await (await deliver(handle, _agent_run().send, message, wait)).result()
    except (WorkflowUpdateFailedError, RPCError) as e:
        if (ended := await ended_by(handle, e)) is None:
            raise  # refused by a run that goes on, or another RPC error
        raise ended from None


async def ended_by(handle: WorkflowHandle[Any, Any], error: Exception) -> RunEnded | None:
    """The run's `RunEnded` when `error`, what a `send` to it raised (a failed update, or
    NOT_FOUND), came from the run having ended: its own failure says why, not Temporal's
    words ("the Workflow completed before the Update completed"); None otherwise."""
    if isinstance(error, RPCError) and error.status != RPCStatusCode.NOT_FOUND:
        return None
    return await ended_run(handle)


async def run(
    client: Client, agent: str | Agent, prompt: str | Sequence[UserContent] | None, **options: Any
) -> RunResult:
    """Start a run and wait for its result; raises `RunError` if it fails, as the failure's
    own class too (`except MaxStepsExceeded`, `except GuardrailTripped`; `.reason`,
    `.message` and `.partial` either way).

    Given the `Agent` itself, a structured `output_type` comes back as an instance of
    that type (validated here, on the client); given only the agent's name, `output`
    is its JSON value (a dict for a pydantic model).
    """
    handle = await start_run(client, agent, prompt, **options)
    try:
        result = await handle.result()
    except WorkflowFailureError as e:
        raise run_error(e) from e
    return typed_output(result, agent)


def typed_output(result: RunResult, agent: str | Agent) -> RunResult:
    """`result` with its output validated into the agent's `output_type` (when known)."""
    adapter = agent.output_adapter if isinstance(agent, Agent) else None
    if adapter is None or result.output is None:
        return result
    return result.model_copy(update={"output": adapter.validate_python(result.output)})


async def events(
    handle: WorkflowHandle[Any, Any],
    *,
    from_offset: int = 0,
    client: Client | None = None,
    poll_cooldown: timedelta = timedelta(milliseconds=100),
) -> AsyncGenerator[RunEvent]:
    """The run's live events (`towline.events.RunEvent`), from `from_offset`, as they happen.

    Follows a running run (across continue-as-new) and ends after its last event
    (`result` or `failed`) once the run has closed; a finished run's events are
    read back the same way (a worker for its agent answers). Each event's `offset`
    is its position in the run's stream: to resume after a disconnect without a
    duplicate or a gap, call again with `from_offset=last.offset + 1`.
    `client` defaults to the handle's own.
    """
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    owner: Client = client or handle._client  # pyright: ignore[reportPrivateUsage]
    stream = WorkflowStreamClient.create(owner, handle.id)
    offset = from_offset
    failures = 0
    while True:
        try:
            async for item in stream.subscribe([EVENTS_TOPIC], from_offset=offset,
                                               poll_cooldown=poll_cooldown):
                data: Any = item.data
                event = RunEvent.model_validate({**(data if isinstance(data, dict) else {}),
                                                 "offset": item.offset})
                offset = item.offset + 1
                failures = 0
                yield event
            return
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            continue  # no worker took the poll in time (a restart, say): poll again
        except RPCError as e:
            # A dropped connection or a server restart: poll again from the next offset
            # (nothing is lost or repeated); other errors, or too many in a row, are raised.
            failures += 1
            if e.status not in _TRANSIENT or failures > _RETRIES:
                raise
            await asyncio.sleep(min(0.2 * 2 ** failures, 5.0))


R = TypeVar("R")


def _agent_run() -> type[AgentRun]:
    """The workflow class, whose queries, updates and signals `RunHandle` calls by reference
    (imported on first use: the workflow side is not loaded with the client)."""
    from towline.workflows import AgentRun

    return AgentRun


class RunHandle:
    """A typed handle on one run (an `AgentRun` workflow): its queries, updates and signals
    called by reference, each taking and returning the models the workflow itself uses.

    Got from `run_handle(client, run_id)` (or `RunHandle(workflow_handle)`); `workflow` is the
    Temporal handle beneath, for what Temporal itself offers (describe, terminate, ...).
    Updates wait `wait` seconds for a worker to take them (`towline.review.delivery`).
    """

    def __init__(self, workflow: WorkflowHandle[Any, Any]) -> None:
        self.workflow: WorkflowHandle[Any, Any] = workflow

    async def _update(self, update: UpdateMethodMultiParam[[Any, Any], R], arg: Any,
                      wait: float | None, waited: float | None = None) -> R:
        """Deliver `update` (`towline.review.delivery.deliver`) and wait for its result."""
        return await (await deliver(self.workflow, update, arg, wait, waited=waited)).result()

    @property
    def id(self) -> str:
        """The run's workflow id."""
        return self.workflow.id

    async def state(self, *, timeout: timedelta | None = None) -> StateQueryResult:
        """Where the run is (its `state` query; `timeout`: the query's RPC timeout)."""
        return await self.workflow.query(_agent_run().state, rpc_timeout=timeout)

    async def pending(self, *, timeout: timedelta | None = None) -> list[PendingApproval]:
        """The calls waiting for a decision or a client's result, in the order they were asked."""
        return (await self.state(timeout=timeout)).pending()

    async def messages(self, *, timeout: timedelta | None = None) -> list[Message]:
        """The conversation so far (the `messages` query)."""
        return list(await self.workflow.query(_agent_run().messages, rpc_timeout=timeout))

    async def approve(self, decision: ApprovalDecision, *, wait: float | None = ACCEPT_WAIT) -> str:
        """Approve a pending call (the `approve` update); what became of it."""
        return await self._update(_agent_run().approve, decision, wait)

    async def reject(self, decision: ApprovalDecision, *, wait: float | None = ACCEPT_WAIT) -> str:
        """Reject a pending call (the `reject` update)."""
        return await self._update(_agent_run().reject, decision, wait)

    async def edit(self, decision: EditDecision, *, wait: float | None = ACCEPT_WAIT) -> str:
        """Approve a pending call with other arguments (the `edit` update)."""
        return await self._update(_agent_run().edit, decision, wait)

    async def respond(self, decision: RespondDecision, *, wait: float | None = ACCEPT_WAIT) -> str:
        """Give a pending call its return; the tool does not run (the `respond` update)."""
        return await self._update(_agent_run().respond, decision, wait)

    async def decide(self, decisions: Decisions, *, wait: float | None = ACCEPT_WAIT,
                     waited: float | None = None) -> list[dict[str, Any]]:
        """Several decisions at once, all applied or none (the `decide` update); their audit
        entries (`waited`: the wait to name when `wait` is what is left of a longer one)."""
        return await self._update(_agent_run().decide, decisions, wait, waited)

    async def tool_result(self, result: ToolResultInput, *,
                          wait: float | None = ACCEPT_WAIT) -> str:
        """A client tool's result (the `tool_result` update)."""
        return await self._update(_agent_run().tool_result, result, wait)

    async def set_policy(self, policy: PolicyUpdate, *,
                         wait: float | None = ACCEPT_WAIT) -> dict[str, Any]:
        """Change the run's approval rules (the `set_policy` update); the policy in force."""
        return await self._update(_agent_run().set_policy, policy, wait)

    async def send(self, content: str | Sequence[UserContent], *,
                   wait: float | None = ACCEPT_WAIT) -> Any:
        """Send a session its next message; its answer (see `send`)."""
        return await send(self.workflow, content, wait=wait)

    def events(self, *, from_offset: int = 0, client: Client | None = None,
               poll_cooldown: timedelta = timedelta(milliseconds=100)) -> AsyncGenerator[RunEvent]:
        """The run's live events (see `events`)."""
        return events(self.workflow, from_offset=from_offset, client=client,
                      poll_cooldown=poll_cooldown)

    async def result(self) -> RunResult:
        """Wait for the run's result; the concrete `RunError` (`MaxStepsExceeded`, ...) if it
        failed."""
        try:
            return RunResult.model_validate(await self.workflow.result())
        except WorkflowFailureError as e:
            raise run_error(e) from e

    async def cancel(self) -> None:
        """Cancel the run at its next step boundary (the `cancel` signal): it fails `Cancelled`."""
        await self.workflow.signal(_agent_run().cancel)

    async def end(self) -> None:
        """End a session once it has answered (the `end` signal)."""
        await self.workflow.signal(_agent_run().end)


def run_handle(client: Client, run_id: str) -> RunHandle:
    """The typed handle of the run with workflow id `run_id`."""
    return RunHandle(client.get_workflow_handle(run_id, result_type=RunResult))


_TRANSIENT = frozenset({
    RPCStatusCode.ABORTED, RPCStatusCode.CANCELLED, RPCStatusCode.INTERNAL,
    RPCStatusCode.UNAVAILABLE, RPCStatusCode.UNKNOWN, RPCStatusCode.RESOURCE_EXHAUSTED,
    # a closed run's events come from a query, which a busy worker (replaying the run on a
    # loaded machine) may not answer in time: "query timed out before a worker could process it"
    RPCStatusCode.DEADLINE_EXCEEDED,
})
"""RPC errors after which `events` polls again."""
_RETRIES = 8
