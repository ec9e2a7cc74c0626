"""A run read back from its Temporal history: each model request as sent, each tool call, the state.

Time travel (`towline.timetravel.travel`) needs what a run's history records, exactly:

- every model request the run made, with the messages it sent. A request travels by
  reference (`towline.runtime.request_chain`): its input names the messages sent before by one
  chain key and carries only the new ones, so the messages are rebuilt here the way a
  worker rebuilds them, from the requests and responses earlier in the history (and
  from the previous executions' across continue-as-new). A message too large to be
  written twice is named by content only; it is found among the messages the history
  holds whole (the run's input, a continued execution's carried conversation, the
  result or the failure's partial run). Earlier protocols (inline messages, per-message
  references) are read too.
- every tool activity: its tool, call id, step, whether the tool is declared
  idempotent, and its outcome.
- the contributed state recorded at each confirmed transition (memo `towline.state`,
  engine 3, see `towline.timetravel.lineage`) and carried into each continued execution.

The executions are those of the run as it stands: from its latest execution back
through `continued_execution_run_id`, so a run that was reset is read along its new
path, not the one it left. Payloads are decoded with the client's data converter
(its codec and payload store).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from towline.activities.io import ModelActivityInput
from towline.activities.model_request import MODEL_ACTIVITY
from towline.mcp import NOT_STARTED
from towline.messages import MESSAGES, Message, ModelResponse
from towline.results import RunInput
from towline.runtime.request_chain import RequestDefinitions
from towline.runtime.request_rebuild import RequestRebuilder
from towline.timetravel.lineage import STATE_MEMO
from towline.workflows.versions import history_engine

__all__ = ["RunHistory", "RecordedRequest", "RecordedToolCall", "HistoryReadError",
           "read_run_history", "TOOL_ACTIVITY_PREFIX"]

TOOL_ACTIVITY_PREFIX = "towline.tool."
"""Activity types of tool calls (`towline.tool.<name>`, MCP tools included)."""

Position = tuple[int, int]
"""Where an event is in a run: (execution index, event id)."""
Outcome = Literal["succeeded", "retry", "failed", "running", "uncertain"]


class HistoryReadError(Exception):
    """The run's history cannot be read (no such run, not an `AgentRun`, unreadable payloads)."""


@dataclass(frozen=True)
class RecordedRequest:
    """One of the run's own model requests (a hook's requests are not the run's steps)."""

    step: int
    """The run step it made."""
    model: str
    """The model it asked."""
    messages: list[Message] | None
    """The messages it sent, instructions first; None if the history cannot rebuild them
    (see `problem`)."""
    definitions: RequestDefinitions | None
    """Its tools, output tools and settings (None when unreadable)."""
    execution: str
    """The Temporal run id of the execution that made it."""
    scheduled_event_id: int
    """Its `ActivityTaskScheduled` event."""
    task_event_id: int
    """The `WorkflowTaskCompleted` event of the workflow task that scheduled it (where a reset
    to this step goes)."""
    position: Position
    problem: str | None = None
    """Why `messages` could not be rebuilt."""


@dataclass(frozen=True)
class RecordedToolCall:
    """One tool activity of the run."""

    tool: str
    call_id: str
    step: int
    args: dict[str, Any]
    idempotent: bool
    """The tool is declared idempotent (recorded in the activity's input; False for histories
    written before that was recorded)."""
    outcome: Outcome
    """`succeeded`, `retry` (ModelRetry) or `failed` (certainly without effect); `running`
    (no outcome yet) or `uncertain` (failed after it may have taken effect)."""
    position: Position

    @property
    def may_have_taken_effect(self) -> bool:
        """Whether running it again could repeat an effect."""
        return self.outcome in ("succeeded", "running", "uncertain")

    def line(self) -> str:
        """One line describing the call."""
        args = json.dumps(self.args, ensure_ascii=False, default=str)
        args = args if len(args) <= 80 else args[:79] + "…"
        note = "" if self.outcome == "succeeded" else f" ({self.outcome})"
        return f"step {self.step}: {self.tool}({args}) call {self.call_id}{note}"


@dataclass
class RunHistory:
    """What a run's history records, across its executions."""

    workflow_id: str
    input: RunInput
    """The first execution's input."""
    task_queue: str
    executions: list[str]
    """Temporal run ids, first to last."""
    requests: list[RecordedRequest] = field(default_factory=list[RecordedRequest])
    """The run's own model requests, in order."""
    tool_calls: list[RecordedToolCall] = field(default_factory=list[RecordedToolCall])
    states: list[tuple[Position, dict[str, Any] | None]] = field(
        default_factory=list[tuple[Position, dict[str, Any] | None]])
    """Recorded contributed states (None: too large to record), in order."""
    records_state: list[bool] = field(default_factory=list[bool])
    """Per execution: whether it records its state (engine 3)."""

    @property
    def steps(self) -> list[int]:
        """The steps whose requests the history holds, in order."""
        return sorted({r.step for r in self.requests})

    def request(self, step: int) -> RecordedRequest | None:
        """The (first) request of `step`."""
        return next((r for r in self.requests if r.step == step), None)

    def state_before(self, request: RecordedRequest) -> tuple[dict[str, Any] | None, str | None]:
        """The contributed state as it was before `request` was made, and, when it is not
        known, why (an older engine, or a state too large to record)."""
        before = [value for pos, value in self.states if pos < request.position]
        if before:
            if before[-1] is None:
                return None, "the run's state was too large to record at that step"
            return dict(before[-1]), None
        if self.records_state[request.position[0]]:
            return {}, None  # recorded from the start, and never anything
        return None, "the run was made by a towline version that did not record its state"

    def calls_after(self, request: RecordedRequest) -> list[RecordedToolCall]:
        """The tool calls made after `request` was scheduled (they would run again after a
        reset to its step)."""
        return [c for c in self.tool_calls if c.position > request.position]


async def _history(client: Client, workflow_id: str, run_id: str | None) -> tuple[
        str, list[HistoryEvent]]:
    """(run id, events) of one execution (None: the latest)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        if run_id is None:  # a reset execution's start event names the run it was reset from
            run_id = (await handle.describe()).run_id
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise HistoryReadError(f"no run {workflow_id!r} in namespace {client.namespace!r}") \
                from None
        raise HistoryReadError(f"cannot read the history of {workflow_id!r}: {e.message}") \
            from None
    return run_id, list(history.events)


async def _executions(client: Client, workflow_id: str) -> list[tuple[str, list[HistoryEvent]]]:
    """(run id, events) of each execution of the run's current path, first to last."""
    run_id, events = await _history(client, workflow_id, None)
    chain: list[tuple[str, list[HistoryEvent]]] = []
    while True:
        if not events or not events[0].HasField("workflow_execution_started_event_attributes"):
            raise HistoryReadError(f"the history of {workflow_id!r} has no start event")
        started = events[0].workflow_execution_started_event_attributes
        if started.workflow_type.name != "AgentRun":
            raise HistoryReadError(f"workflow {workflow_id!r} is a {started.workflow_type.name}, "
                                   "not an AgentRun")
        chain.insert(0, (run_id, events))
        previous = started.continued_execution_run_id
        if not previous:
            return chain
        run_id, events = await _history(client, workflow_id, previous)


def _engine_3(events: list[HistoryEvent]) -> bool:
    """Whether the history was written by engine 3 or newer (it records state snapshots)."""
    return history_engine(events) >= 3


def _summary(event: HistoryEvent) -> str | None:
    if not event.user_metadata.HasField("summary"):
        return None
    try:
        value = json.loads(event.user_metadata.summary.data or b'""')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


class _Reader(RequestRebuilder):
    """Walks a run's executions, rebuilding its requests as a worker's request cache would."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client
        self.keys: dict[Position, str] = {}
        """The chain key of each model request by its scheduled event."""
        self.tools: dict[Position, tuple[str, dict[str, Any]]] = {}
        """Tool activities without an outcome yet: (tool name, input) by scheduled event."""
        self.started: set[Position] = set()

    async def decode(self, payloads: Any) -> Any:
        try:
            values = await self.client.data_converter.decode(list(payloads), [dict[str, Any]])
        except Exception as e:  # noqa: BLE001 - no key, no store: said in words
            raise HistoryReadError(f"a payload of the history cannot be decoded ({type(e).__name__}"
                                   f": {e}); pass the run's --encrypt / payload store") from None
        return values[0] if values else None

    async def know_payloads(self, payloads: Any, key: str) -> None:
        """Messages a payload holds whole (an input's history, a result, a partial run)."""
        try:
            value = await self.decode(payloads)
            raw: Any = value.get(key) if isinstance(value, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(raw, dict):
                raw = raw.get("messages")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if raw:
                self.know(MESSAGES.validate_python(raw))
        except (HistoryReadError, ValidationError):
            return


async def read_run_history(client: Client, workflow_id: str) -> RunHistory:
    """Read run `workflow_id` (all executions of its current path) from its history."""
    executions = await _executions(client, workflow_id)
    reader = _Reader(client)
    first = executions[0][1][0].workflow_execution_started_event_attributes
    raw = await reader.decode(first.input.payloads)
    try:
        inp = RunInput.model_validate(raw)
    except ValidationError as e:
        raise HistoryReadError(f"the input of run {workflow_id!r} is not a RunInput: "
                               f"{str(e).splitlines()[0]}") from None
    run = RunHistory(workflow_id=workflow_id, input=inp, task_queue=first.task_queue.name,
                     executions=[run_id for run_id, _ in executions])
    for index, (_, events) in enumerate(executions):  # whole messages first, for the references
        started = events[0].workflow_execution_started_event_attributes
        await reader.know_payloads(started.input.payloads, "message_history")
        await reader.know_payloads(started.input.payloads, "resume")
        last = events[-1]
        if last.HasField("workflow_execution_completed_event_attributes"):
            await reader.know_payloads(last.workflow_execution_completed_event_attributes.result.payloads,
                                       "messages")
        elif last.HasField("workflow_execution_failed_event_attributes"):
            info = last.workflow_execution_failed_event_attributes.failure.application_failure_info
            await reader.know_payloads(info.details.payloads, "messages")
    for index, (run_id, events) in enumerate(executions):
        run.records_state.append(_engine_3(events))
        if index > 0:
            raw_next = await reader.decode(events[0].workflow_execution_started_event_attributes
                                           .input.payloads)
            resume: Any = raw_next.get("resume") if isinstance(raw_next, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            state: Any = resume.get("state") if isinstance(resume, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(state, dict):
                run.states.append(((index, 0), dict(state)))  # pyright: ignore[reportUnknownArgumentType]
        await _walk(reader, run, index, run_id, events)
    return run


async def _walk(reader: _Reader, run: RunHistory, index: int, run_id: str,
                events: list[HistoryEvent]) -> None:
    task = 0
    for event in events:
        pos: Position = (index, event.event_id)
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task = event.event_id
        elif kind == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
            if STATE_MEMO in fields:
                value: Any = await reader.decode([fields[STATE_MEMO]])
                run.states.append((pos, dict(value) if isinstance(value, dict) else None))  # pyright: ignore[reportUnknownArgumentType]
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name = attrs.activity_type.name
            if name == MODEL_ACTIVITY:
                await _model_request(reader, run, pos, run_id, task, event)
            elif name.startswith(TOOL_ACTIVITY_PREFIX):
                value = await reader.decode(attrs.input.payloads)
                reader.tools[pos] = (name.removeprefix(TOOL_ACTIVITY_PREFIX),
                                     value if isinstance(value, dict) else {})  # pyright: ignore[reportUnknownArgumentType]
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            reader.started.add((index, event.activity_task_started_event_attributes.scheduled_event_id))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs_c = event.activity_task_completed_event_attributes
            scheduled: Position = (index, attrs_c.scheduled_event_id)
            value = await reader.decode(attrs_c.result.payloads)
            if scheduled in reader.keys:
                try:
                    reader.answered(reader.keys[scheduled], ModelResponse.model_validate(value))
                except ValidationError:
                    pass
            elif scheduled in reader.tools:
                status: Any = value.get("status") if isinstance(value, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                outcome: Outcome = status if status in ("succeeded", "retry", "failed") else "uncertain"
                _tool_call(reader, run, scheduled, outcome)
        elif kind in (EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
                      EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
                      EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED):
            scheduled = (index, _scheduled_id(event))
            if scheduled in reader.tools:
                not_started = (event.activity_task_failed_event_attributes.failure
                               .application_failure_info.type == NOT_STARTED)
                effect = scheduled in reader.started and not not_started
                _tool_call(reader, run, scheduled, "uncertain" if effect else "failed")
    for scheduled in [p for p in reader.tools if p[0] == index]:  # no outcome (yet)
        _tool_call(reader, run, scheduled, "running" if scheduled in reader.started else "failed")


def _scheduled_id(event: HistoryEvent) -> int:
    for name in ("activity_task_failed_event_attributes", "activity_task_timed_out_event_attributes",
                 "activity_task_canceled_event_attributes"):
        if event.HasField(name):
            return getattr(event, name).scheduled_event_id
    return 0


async def _model_request(reader: _Reader, run: RunHistory, pos: Position, run_id: str, task: int,
                         event: HistoryEvent) -> None:
    value = await reader.decode(event.activity_task_scheduled_event_attributes.input.payloads)
    try:
        inp = ModelActivityInput.model_validate(value)
    except ValidationError:
        return
    rebuilt = reader.request(inp)
    if rebuilt.key is not None:
        reader.keys[pos] = rebuilt.key
    summary = _summary(event)
    own = summary is None or summary == f"{inp.model} · step {inp.run_step}"
    if own and inp.run_step > 0 and run.request(inp.run_step) is None:
        run.requests.append(RecordedRequest(
            step=inp.run_step, model=inp.model, messages=rebuilt.messages,
            definitions=rebuilt.definitions, execution=run_id, scheduled_event_id=pos[1],
            task_event_id=task, position=pos, problem=rebuilt.problem))


def _tool_call(reader: _Reader, run: RunHistory, scheduled: Position, outcome: Outcome) -> None:
    found = reader.tools.pop(scheduled, None)
    if found is None:
        return
    tool, inp = found
    ctx: Any = inp.get("ctx") if isinstance(inp.get("ctx"), dict) else {}
    args: Any = inp.get("args") if isinstance(inp.get("args"), dict) else {}
    call_id: Any = inp.get("tool_call_id") or ctx.get("tool_call_id") or ""
    step: Any = inp.get("run_step") or ctx.get("run_step") or 0
    call = RecordedToolCall(tool=tool, call_id=str(call_id), step=step if isinstance(step, int) else 0,
                            args=dict(args), idempotent=inp.get("idempotent") is True,
                            outcome=outcome, position=scheduled)
    run.tool_calls.append(call)
    run.tool_calls.sort(key=lambda c: c.position)
