"""Reading one run's events: the walk behind `towline.replay.run_history`'s readers.

`HistoryReader` decodes each event's payloads and keeps, across a run's executions, what a
later event refers to: the chain keys and messages of the requests so far (it is a
`RequestRebuilder`), the activities scheduled and not ended yet, and which ones started.
`request_digest` is what replay's request check compares, for the recorded requests here
and the replayed ones (`towline.replay.requests`).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any, cast

from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from towline.activities.io import ModelActivityInput
from towline.activities.model_request import MODEL_ACTIVITY
from towline.mcp import NOT_STARTED
from towline.messages import COMPACT, MESSAGES, ModelResponse
from towline.replay.records import (
    HistoryReadError,
    Outcome,
    Position,
    RecordedOutcome,
    RecordedRequest,
    RecordedToolCall,
    RunHistory,
)
from towline.runtime.request_chain import ChainedRequest
from towline.runtime.request_rebuild import RequestRebuilder
from towline.timetravel.lineage import STATE_MEMO

__all__ = ["HistoryReader", "request_digest", "TOOL_ACTIVITY_PREFIX"]

TOOL_ACTIVITY_PREFIX = "towline.tool."
"""Activity types of tool calls (`towline.tool.<name>`, MCP tools included)."""

_E = EventType


def request_digest(value: Any) -> tuple[str, str]:
    """What replay compares of a model request's input: a SHA-256 and the protocol (`chain`,
    today's, or `inline`, an earlier one; digests of two protocols are not comparable).

    A chained request counts by its model and new messages, read through today's models
    (a field added since, written at its default, is no change); the keys naming earlier
    messages are hashes of an older encoding, and an agent that gained a tool is a
    compatible change (its recorded answers still fit), so both are left out."""
    data: Any = to_jsonable_python(value, context={COMPACT: True})
    fields = cast(dict[str, Any], data) if isinstance(data, dict) else {}
    content: Any = cast(Any, data)
    if "chain" in fields:
        try:
            chain = ChainedRequest.model_validate(fields["chain"])
            content = to_jsonable_python({"model": fields.get("model"), "new": chain.new},
                                         context={COMPACT: True})
        except (ValidationError, TypeError):
            content = fields
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest(), "chain" if "chain" in fields else "inline"


def _summary(event: HistoryEvent) -> str:
    if not event.user_metadata.HasField("summary"):
        return ""
    try:
        value = json.loads(event.user_metadata.summary.data or b'""')
    except ValueError:
        return base64.b64encode(event.user_metadata.summary.data).decode()
    return value if isinstance(value, str) else ""


def _failure_of(err: BaseException) -> ApplicationError:
    """An activity's final failure as the non-retryable `ApplicationError` it ended with."""
    cause: BaseException = err
    while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    return ApplicationError(str(err), type=type(err).__name__, non_retryable=True)


_ENDED = {_E.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("failed", "activity_task_failed_event_attributes"),
          _E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: (
              "timed-out", "activity_task_timed_out_event_attributes"),
          _E.EVENT_TYPE_ACTIVITY_TASK_CANCELED: (
              "cancelled", "activity_task_canceled_event_attributes")}
"""How an activity ended otherwise than completed: its name here, and its attributes' field."""


class HistoryReader(RequestRebuilder):
    """Walks a run's executions, rebuilding its requests as a worker's request cache would."""

    def __init__(self, converter: DataConverter, lenient: bool) -> None:
        super().__init__()
        self.converter = converter
        self.lenient = lenient
        self.model_requests: dict[Position, int] = {}
        """Index in `RunHistory.requests` of each model request, by its scheduled event."""
        self.keys: dict[Position, str] = {}
        """The chain key of each model request, by its scheduled event."""
        self.tools: dict[Position, tuple[str, dict[str, Any]]] = {}
        """Tool activities without an outcome yet: (activity type, input) by scheduled event."""
        self.others: dict[Position, str] = {}
        self.started: set[Position] = set()

    async def decode(self, payloads: Any) -> Any:
        """The value of `payloads` (None: nothing, or undecodable when `lenient`)."""
        try:
            values = await self.converter.decode(list(payloads))
        except Exception as e:  # noqa: BLE001 - no key, no store: said in words
            if self.lenient:
                return None
            raise HistoryReadError(f"a payload of the history cannot be decoded ({type(e).__name__}"
                                   f": {e}); pass the run's --encrypt / payload store") from None
        return values[0] if values else None

    async def know_payloads(self, payloads: Any, key: str) -> None:
        """Messages a payload holds whole (an input's history, a carried conversation)."""
        try:
            value = await self.decode(payloads)
            raw: Any = value.get(key) if isinstance(value, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(raw, dict):
                raw = raw.get("messages")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if raw:
                self.know(MESSAGES.validate_python(raw))
        except (HistoryReadError, ValidationError):
            return

    async def outcome(self, last: HistoryEvent) -> RecordedOutcome:
        """How the execution ending with `last` ended (its messages made known)."""
        kind = last.event_type
        if kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            value: Any = await self.decode(
                last.workflow_execution_completed_event_attributes.result.payloads)
            fields = cast(dict[str, Any], value) if isinstance(value, dict) else {}
            return RecordedOutcome("succeeded", output=fields.get("output", value),
                                   messages=self._messages(fields.get("messages")))
        if kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            err = await self.failure(last.workflow_execution_failed_event_attributes.failure)
            if err is None:
                return RecordedOutcome("failed")
            partial: Any = err.details[0] if err.details else None
            messages = partial.get("messages") if isinstance(partial, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            return RecordedOutcome("failed", reason=err.type, message=err.message,
                                   messages=self._messages(messages))
        return RecordedOutcome({
            _E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
            _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
            _E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed-out",
        }.get(kind, "running"))

    async def failure(self, failure: Any) -> ApplicationError | None:
        """A recorded failure, decoded (None: undecodable, when `lenient`)."""
        try:
            return _failure_of(await self.converter.decode_failure(failure))
        except Exception as e:  # noqa: BLE001 - no key, no store: said in words
            if self.lenient:
                return None
            raise HistoryReadError(f"a failure in the history cannot be decoded ({type(e).__name__}"
                                   f": {e}); pass the run's --encrypt / payload store") from None

    def _messages(self, raw: Any) -> Any:
        try:
            messages = MESSAGES.validate_python(raw) if raw else None
        except ValidationError:
            return None
        if messages:
            self.know(messages)
        return messages

    async def read_execution(self, run: RunHistory, index: int, run_id: str,
                             events: Sequence[HistoryEvent]) -> None:
        """Read one execution's events into `run`."""
        task = 0
        for event in events:
            pos: Position = (index, event.event_id)
            kind = event.event_type
            if kind == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                task = event.event_id
            elif kind == _E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
                fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
                if STATE_MEMO in fields:
                    value: Any = await self.decode([fields[STATE_MEMO]])
                    run.states.append((pos, dict(value) if isinstance(value, dict) else None))  # pyright: ignore[reportUnknownArgumentType]
            elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                await self._scheduled(run, pos, run_id, task, event)
            elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                self.started.add((index, event.activity_task_started_event_attributes.scheduled_event_id))
            elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = event.activity_task_completed_event_attributes
                await self._completed(run, (index, attrs.scheduled_event_id),
                                      await self.decode(attrs.result.payloads))
            elif kind in _ENDED:
                ended, name = _ENDED[kind]
                attrs_e: Any = getattr(event, name)
                failure = None if kind == _E.EVENT_TYPE_ACTIVITY_TASK_CANCELED else (
                    await self.failure(attrs_e.failure))
                self._failed(run, (index, attrs_e.scheduled_event_id), ended, failure, attrs_e)
        for scheduled in [p for p in self.tools if p[0] == index]:  # no outcome (yet)
            self._tool_call(run, scheduled, "running", None)

    async def _scheduled(self, run: RunHistory, pos: Position, run_id: str, task: int,
                         event: HistoryEvent) -> None:
        attrs = event.activity_task_scheduled_event_attributes
        name = attrs.activity_type.name
        value: Any = await self.decode(attrs.input.payloads)
        if name == MODEL_ACTIVITY:
            self._model_request(run, pos, run_id, task, _summary(event), value)
        elif name.startswith(TOOL_ACTIVITY_PREFIX):
            self.tools[pos] = (name, cast(dict[str, Any], value) if isinstance(value, dict) else {})
        else:
            self.others[pos] = name

    def _model_request(self, run: RunHistory, pos: Position, run_id: str, task: int, summary: str,
                       value: Any) -> None:
        digest, protocol = request_digest(value) if value is not None else (None, "chain")
        fields = cast(dict[str, Any], value) if isinstance(value, dict) else {}
        step = fields.get("run_step")
        request = RecordedRequest(
            step=step if isinstance(step, int) else 0, model=str(fields.get("model", "")),
            messages=[], definitions=None, execution=run_id, scheduled_event_id=pos[1],
            task_event_id=task, position=pos, index=len(run.requests) + 1, summary=summary,
            digest=digest, protocol=protocol, unreadable="its input cannot be decoded")
        if value is not None:
            try:
                inp = ModelActivityInput.model_validate(value)
            except ValidationError as e:
                request = dataclasses.replace(
                    request, unreadable=f"its input is unreadable: {e.errors()[0]['msg']}")
            else:
                rebuilt = self.request(inp)
                if rebuilt.key is not None:
                    self.keys[pos] = rebuilt.key
                request = dataclasses.replace(
                    request, step=inp.run_step, model=inp.model, messages=rebuilt.messages,
                    definitions=rebuilt.definitions, missing_prefix=rebuilt.missing_prefix,
                    unreadable=None, agent=inp.agent,
                    own=inp.run_step > 0 and summary in ("", f"{inp.model} · step {inp.run_step}"))
        self.model_requests[pos] = len(run.requests)
        run.requests.append(request)

    async def _completed(self, run: RunHistory, scheduled: Position, value: Any) -> None:
        if scheduled in self.model_requests:
            try:
                response = ModelResponse.model_validate(value)
            except ValidationError:
                return
            self.know([response])  # an earlier protocol names it by reference
            if scheduled in self.keys:
                self.answered(self.keys[scheduled], response)
            i = self.model_requests[scheduled]
            run.requests[i] = dataclasses.replace(run.requests[i], response=response)
        elif scheduled in self.tools:
            # a succeeded call's result leaves its status out (`ToolActivityResult.status`)
            status: Any = value.get("status", "succeeded") if isinstance(value, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            outcome: Outcome = status if status in ("succeeded", "retry", "failed") else "uncertain"
            self._tool_call(run, scheduled, outcome, "completed", result=value)
        elif scheduled in self.others:
            run.others.setdefault(self.others.pop(scheduled), []).append(value)

    def _failed(self, run: RunHistory, scheduled: Position, ended: Any,
                failure: ApplicationError | None, attrs: Any) -> None:
        if scheduled in self.model_requests:
            i = self.model_requests[scheduled]
            run.requests[i] = dataclasses.replace(run.requests[i], failure=failure)
        elif scheduled in self.tools:
            info = getattr(getattr(attrs, "failure", None), "application_failure_info", None)
            not_started = info is not None and info.type == NOT_STARTED
            effect = scheduled in self.started and not not_started
            self._tool_call(run, scheduled, "uncertain" if effect else "failed", ended,
                            failure=failure)
        else:
            self.others.pop(scheduled, None)

    def _tool_call(self, run: RunHistory, scheduled: Position, outcome: Outcome, ended: Any, *,
                   result: Any = None, failure: ApplicationError | None = None) -> None:
        found = self.tools.pop(scheduled, None)
        if found is None:
            return
        activity, inp = found
        ctx: Any = inp.get("ctx") if isinstance(inp.get("ctx"), dict) else {}
        args: Any = inp.get("args") if isinstance(inp.get("args"), dict) else {}
        call_id: Any = inp.get("tool_call_id") or ctx.get("tool_call_id") or ""
        step: Any = inp.get("run_step") or ctx.get("run_step") or 0
        run.tool_calls.append(RecordedToolCall(
            tool=activity.removeprefix(TOOL_ACTIVITY_PREFIX), call_id=str(call_id),
            step=step if isinstance(step, int) else 0, args=dict(args),
            idempotent=inp.get("idempotent") is True, outcome=outcome, position=scheduled,
            activity=activity, ended=ended, result=result, failure=failure))
        run.tool_calls.sort(key=lambda c: c.position)
