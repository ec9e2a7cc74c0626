"""A recorded run, read back for `towline rerun`: its input, every model request with the
response it got, every tool call with its result, its outcome and its ledger.

A model activity's input does not carry the whole conversation (`towline.runtime.request_chain`):
it names the messages sent before by a chain key and carries only the new ones. Reading
the activities in order rebuilds every request, since each key is a hash of the messages
before it: the keys of a request's messages and of its response are remembered, so a later
request's `prev` names a known list. A message written into the history only by reference
(one larger than `INLINE_LIMIT`, say a big tool result) stays a reference; comparisons treat
it as unknown. Earlier protocols (`message_refs`, inline `messages`) are read too. Payloads
are decoded with the given data converter, so encrypted runs and payload-store references
read as they do on a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from towline.activities.io import ModelActivityInput
from towline.activities.model_request import MODEL_ACTIVITY
from towline.messages import Message, ModelResponse
from towline.results import Counters
from towline.runtime.ledger import counters_from_history
from towline.runtime.request_chain import ROOT, RequestDefinitions, chain_key, content_ref
from towline.runtime.request_refs import message_ref

__all__ = ["RecordedRequest", "RecordedTool", "RecordedOutcome", "Recording", "read_recording",
           "TOOL_PREFIX"]

TOOL_PREFIX = "towline.tool."
"""Activity types of tool calls (`Tool.activity_name`)."""

Known = Message | str
"""A recorded message, or the content reference of one the history does not hold."""


@dataclass(frozen=True)
class RecordedRequest:
    """One model request of the recorded run and what came back."""

    index: int
    """Its position among the run's model requests, from 1."""
    step: int
    """The run step it belongs to."""
    model: str
    """The model it asked for."""
    summary: str
    """Who asked (the activity summary: the run itself, or a hook)."""
    messages: list[Known]
    """What it sent (a `str` is a message only known by reference)."""
    definitions: RequestDefinitions | None
    """Tools, output tools and settings offered (None: not recoverable)."""
    unknown_prefix: bool = False
    """Its earliest messages could not be recovered (only the tail is compared)."""
    response: ModelResponse | None = None
    """The response the run got (None: the request failed)."""
    failure: ApplicationError | None = None
    """Why it failed, for good (None: it succeeded)."""


@dataclass(frozen=True)
class RecordedTool:
    """One tool call the recorded run executed as an activity."""

    activity: str
    """Its activity type."""
    tool: str
    """The tool's name."""
    step: int
    """The run step of the response that asked for it."""
    call_id: str
    """The call's id."""
    args: dict[str, Any]
    """Its arguments."""
    result: Any = None
    """The activity's result as JSON (None when it failed)."""
    failure: ApplicationError | None = None
    """Why the activity failed (None: it completed)."""


@dataclass(frozen=True)
class RecordedOutcome:
    """How a run ended."""

    status: str
    """`succeeded`, `failed`, `running` (not closed), `terminated`, `cancelled`, `timed-out`."""
    output: Any = None
    """The output (succeeded runs)."""
    reason: str | None = None
    """The failure reason (`MaxStepsExceeded`, ...) of a failed run."""
    message: str | None = None
    """The failure's message."""

    def line(self) -> str:
        """The outcome in one line."""
        if self.status == "succeeded":
            return f"succeeded: {short(self.output)}"
        if self.status == "failed":
            return f"failed: {self.reason}: {short(self.message, 120)}"
        return self.status

    def to_json(self) -> dict[str, Any]:
        """Its JSON form."""
        return {"status": self.status, "output": self.output, "reason": self.reason,
                "message": self.message}


@dataclass
class Recording:
    """Everything `towline rerun` needs from a recorded run (every execution, in order)."""

    workflow_id: str
    run_input: dict[str, Any]
    """The first execution's input (a `RunInput` as JSON)."""
    requests: list[RecordedRequest] = field(default_factory=list[RecordedRequest])
    tools: list[RecordedTool] = field(default_factory=list[RecordedTool])
    others: dict[str, list[Any]] = field(default_factory=dict[str, list[Any]])
    """Results of other activities (an MCP server's tool list), per type, in order."""
    outcome: RecordedOutcome = field(default_factory=lambda: RecordedOutcome("running"))
    counters: Counters | None = None
    """The last ledger snapshot."""


def short(value: Any, limit: int = 80) -> str:
    """A value in at most `limit` characters of one line."""
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def _one(converter: DataConverter, payloads: Sequence[Any]) -> Any:
    if not payloads:
        return None
    [value] = await converter.decode(list(payloads))
    return value


def _summary(event: HistoryEvent) -> str:
    import json

    if not event.user_metadata.HasField("summary"):
        return ""
    try:
        return str(json.loads(event.user_metadata.summary.data or b'""'))
    except ValueError:
        return ""


def _failure_of(err: BaseException) -> ApplicationError:
    cause: BaseException = err
    while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    return ApplicationError(str(err), type=type(err).__name__, non_retryable=True)


class _Chains:
    """The messages behind every chain key seen so far (`towline.runtime.request_chain`)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, Known]] = {}
        self.by_ref: dict[str, Message] = {}
        self.legacy: dict[str, Message] = {}
        self.definitions: dict[str, RequestDefinitions] = {}

    def note(self, message: Message) -> str:
        ref = content_ref(message)
        self.by_ref[ref] = message
        self.legacy[message_ref(message)] = message
        return ref

    def walk(self, key: str) -> tuple[list[Known], bool]:
        """The messages a key names, and whether some of them are unknown (a missing prefix)."""
        found: list[Known] = []
        seen: set[str] = set()
        while key != ROOT:
            node = self.nodes.get(key)
            if node is None or key in seen:
                found.reverse()
                return found, True
            seen.add(key)
            key, message = node
            found.append(message)
        found.reverse()
        return found, False

    def extend(self, prev: str, items: Sequence[Known]) -> str:
        key = prev
        for item in items:
            ref = self.note(item) if not isinstance(item, str) else item
            nxt = chain_key(key, ref)
            self.nodes.setdefault(nxt, (key, item))
            key = nxt
        return key

    def request(self, inp: ModelActivityInput) -> tuple[list[Known], RequestDefinitions | None, bool, str | None]:
        """A request's messages, definitions, whether a prefix is unknown, and its key."""
        if inp.chain is not None:
            chain = inp.chain
            prefix, unknown = self.walk(chain.prev)
            new: list[Known] = [self.by_ref.get(m, m) if isinstance(m, str) else m for m in chain.new]
            key = self.extend(chain.prev, new)
            if chain.definitions is not None:
                self.definitions[chain.defs] = chain.definitions
            return [*prefix, *new], self.definitions.get(chain.defs), unknown, key
        for m in inp.messages:
            self.note(m)
        definitions = RequestDefinitions(tools=inp.tools, output_tools=inp.output_tools,
                                         settings=inp.settings, output_mode=inp.output_mode,
                                         output_schema=inp.output_schema)
        if inp.message_refs is None:
            return list(inp.messages), definitions, False, None
        return [self.legacy.get(r, r) for r in inp.message_refs], definitions, False, None


async def _outcome(last: HistoryEvent, converter: DataConverter) -> RecordedOutcome:
    kind = last.event_type
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        value = await _one(converter, last.workflow_execution_completed_event_attributes.result.payloads)
        output = cast(dict[str, Any], value).get("output") if isinstance(value, dict) else value
        return RecordedOutcome("succeeded", output=output)
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        failure = last.workflow_execution_failed_event_attributes.failure
        err = _failure_of(await converter.decode_failure(failure))
        return RecordedOutcome("failed", reason=err.type, message=err.message)
    names = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed-out",
    }
    return RecordedOutcome(names.get(kind, "running"))


async def read_recording(histories: Sequence[WorkflowHistory], converter: DataConverter) -> Recording:
    """Read a run from the histories of its executions (first to last)."""
    if not histories or not histories[0].events:
        raise ValueError("the history is empty")
    first = histories[0].events[0]
    if first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise ValueError("the history does not start with the workflow's start")
    started = first.workflow_execution_started_event_attributes
    if started.workflow_type.name != "AgentRun":
        raise ValueError(f"not a towline run: the workflow type is {started.workflow_type.name!r}")
    value = await _one(converter, started.input.payloads)
    if not isinstance(value, dict):
        raise ValueError("the run's input is not a RunInput")  # noqa: TRY004 - a bad recording
    run_input = {k: v for k, v in cast(dict[str, Any], value).items() if k != "resume"}
    recording = Recording(workflow_id=histories[0].workflow_id, run_input=run_input)
    chains = _Chains()
    events: list[HistoryEvent] = []
    for history in histories:
        scheduled: dict[int, HistoryEvent] = {}
        for event in history.events:
            events.append(event)
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[event.event_id] = event
                continue
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = event.activity_task_completed_event_attributes
                result, failure = await _one(converter, attrs.result.payloads), None
                sched = scheduled.get(attrs.scheduled_event_id)
            elif kind in (EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
                          EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT):
                f = (event.activity_task_failed_event_attributes.failure
                     if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                     else event.activity_task_timed_out_event_attributes.failure)
                sid = (event.activity_task_failed_event_attributes.scheduled_event_id
                       if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                       else event.activity_task_timed_out_event_attributes.scheduled_event_id)
                result, failure = None, _failure_of(await converter.decode_failure(f))
                sched = scheduled.get(sid)
            else:
                continue
            if sched is not None:
                await _note_activity(recording, chains, converter, sched, result, failure)
        recording.outcome = await _outcome(history.events[-1], converter)
    snapshots = counters_from_history(events)
    recording.counters = snapshots[-1] if snapshots else None
    return recording


async def _note_activity(recording: Recording, chains: _Chains, converter: DataConverter,
                         sched: HistoryEvent, result: Any, failure: ApplicationError | None) -> None:
    attrs = sched.activity_task_scheduled_event_attributes
    name = attrs.activity_type.name
    value = await _one(converter, attrs.input.payloads)
    if name == MODEL_ACTIVITY:
        try:
            inp = ModelActivityInput.model_validate(value)
        except ValidationError as e:
            raise ValueError(f"model request {len(recording.requests) + 1} is unreadable: "
                             f"{e.errors()[0]['msg']}") from None
        messages, definitions, unknown, key = chains.request(inp)
        response = ModelResponse.model_validate(result) if failure is None else None
        if response is not None:
            ref = chains.note(response)
            if key is not None and response.id:
                chains.nodes.setdefault(chain_key(key, ref), (key, response))
        recording.requests.append(RecordedRequest(
            index=len(recording.requests) + 1, step=inp.run_step, model=inp.model,
            summary=_summary(sched), messages=messages, definitions=definitions,
            unknown_prefix=unknown, response=response, failure=failure))
    elif name.startswith(TOOL_PREFIX):
        fields = cast(dict[str, Any], value) if isinstance(value, dict) else {}
        ctx = cast(dict[str, Any], fields.get("ctx") or {})
        args = fields.get("args")
        recording.tools.append(RecordedTool(
            activity=name, tool=name.removeprefix(TOOL_PREFIX),
            step=int(fields.get("run_step") or ctx.get("run_step") or 0),
            call_id=str(fields.get("tool_call_id") or ctx.get("tool_call_id") or ""),
            args=cast(dict[str, Any], args) if isinstance(args, dict) else {},
            result=result, failure=failure))
    elif failure is None:
        recording.others.setdefault(name, []).append(result)
