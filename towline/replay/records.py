"""The record of a run as its Temporal history holds it: one type for every reader.

`towline.replay.run_history` reads a run's executions into a `RunHistory`: its input,
every model request (the run's own and its hooks') with what it sent and got back, every
tool activity with its outcome, the contributed states it recorded, how it ended and its
last ledger. Fork and reset (`towline.timetravel.travel`), rerun (`towline.testing.rerun`),
replay's request check (`towline.replay.requests`) and `towline show` all read runs this
way.

A message the history names only by its content reference has two readings
(`towline.runtime.request_rebuild`): `RecordedRequest.messages` keeps a placeholder for it
(the reference, a `str`: what rerun compares as "any message"), and
`RecordedRequest.resolved` is None with `RecordedRequest.problem` saying why (what fork
needs: every message, or a reason it cannot start).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from towline.messages import Message, ModelRequest, ModelResponse, SystemPart
from towline.results import Counters, RunInput
from towline.runtime.request_chain import RequestDefinitions
from towline.runtime.request_rebuild import UNKNOWN_PREFIX, UNRESOLVED, Sent

__all__ = ["RunHistory", "RecordedRequest", "RecordedToolCall", "RecordedOutcome",
           "HistoryReadError", "Position", "Outcome", "Sent", "without_instructions", "short",
           "started_input"]

M = TypeVar("M", bound="Message | str")
Position = tuple[int, int]
"""Where an event is in a run: (execution index, event id)."""
Outcome = Literal["succeeded", "retry", "failed", "running", "uncertain"]


class HistoryReadError(ValueError):
    """The run's history cannot be read (no such run, not an `AgentRun`, unreadable payloads)."""


def without_instructions(messages: Sequence[M]) -> list[M]:
    """A request's messages without the instructions it was sent with (a message of their
    own, first, when the agent has them): the conversation."""
    first = messages[0] if messages else None
    if isinstance(first, ModelRequest) and first.id == "instructions" and \
            all(isinstance(p, SystemPart) for p in first.parts):
        return list(messages[1:])
    return list(messages)


async def started_input(converter: DataConverter, started: HistoryEvent) -> dict[str, Any]:
    """The input a run's `WorkflowExecutionStarted` event carries ({} when there is none, or it
    cannot be read here, e.g. encrypted without the key)."""
    try:
        values = await converter.decode(
            started.workflow_execution_started_event_attributes.input.payloads)
    except Exception:  # noqa: BLE001 - an unreadable input: nothing to show, not an error
        return {}
    first: Any = values[0] if values else None
    return first if isinstance(first, dict) else {}  # pyright: ignore[reportUnknownVariableType]


def short(value: Any, limit: int = 80) -> str:
    """A value in at most `limit` characters of one line."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class RecordedRequest:
    """One model request of the run, the run's own or a hook's, and what came back."""

    step: int
    """The run step it belongs to."""
    model: str
    """The model it asked for."""
    messages: list[Sent]
    """What it sent, instructions first; a `str` is a message the history names only by its
    reference (only the tail the history holds when `missing_prefix`)."""
    definitions: RequestDefinitions | None
    """Its tools, output tools and settings (None: not recoverable)."""
    execution: str
    """The Temporal run id of the execution that made it."""
    scheduled_event_id: int
    """Its `ActivityTaskScheduled` event."""
    task_event_id: int
    """The `WorkflowTaskCompleted` event of the workflow task that scheduled it (where a reset
    to this step goes)."""
    position: Position
    index: int = 0
    """Its position among the run's model requests (its own and its hooks'), from 1."""
    summary: str = ""
    """Who asked (the activity summary: `<model> · step <n>` for the run itself, or a hook)."""
    own: bool = True
    """It is the request of the run's step, not a hook's."""
    missing_prefix: bool = False
    """Its earliest messages are not in the history at all."""
    unreadable: str | None = None
    """Why its input could not be read (then `messages` is empty)."""
    digest: str | None = None
    """What replay compares (`towline.replay.requests.request_digest`; None: unreadable)."""
    protocol: str = "chain"
    """How its input carries the messages: `chain` (today's) or `inline` (an earlier one)."""
    response: ModelResponse | None = None
    """The response it got (None: it failed, or it has not ended)."""
    failure: ApplicationError | None = None
    """Why it failed for good (None: it succeeded, or it has not ended)."""
    agent: str = ""
    """The agent that made it (after a handoff, the one the run was handed to)."""

    @property
    def resolved(self) -> list[Message] | None:
        """Every message it sent, or None when the history does not hold one (see `problem`)."""
        if self.problem is not None:
            return None
        return [m for m in self.messages if not isinstance(m, str)]

    @property
    def problem(self) -> str | None:
        """Why `resolved` is None (None: every message is known)."""
        if self.unreadable is not None:
            return self.unreadable
        if self.missing_prefix:
            return UNKNOWN_PREFIX
        return UNRESOLVED if any(isinstance(m, str) for m in self.messages) else None

    @property
    def conversation(self) -> list[Sent]:
        """What it sent without the instructions it was sent with."""
        return self.messages if self.missing_prefix else without_instructions(self.messages)


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
    (no outcome yet: it may have taken effect) or `uncertain` (failed after it may have)."""
    position: Position
    activity: str = ""
    """Its activity type (`towline.tool.<name>`)."""
    ended: Literal["completed", "failed", "timed-out", "cancelled"] | None = None
    """How its activity ended (None: it has not)."""
    result: Any = None
    """The activity's result as JSON (None unless it completed)."""
    failure: ApplicationError | None = None
    """Why the activity failed or timed out."""

    @property
    def may_have_taken_effect(self) -> bool:
        """Whether running it again could repeat an effect."""
        return self.outcome in ("succeeded", "running", "uncertain")

    def line(self) -> str:
        """One line describing the call."""
        args = json.dumps(self.args, ensure_ascii=False, default=str)
        args = args if len(args) <= 80 else args[:79] + "…"
        note = {"succeeded": "", "running": " (running: may have taken effect)"}.get(
            self.outcome, f" ({self.outcome})")
        return f"step {self.step}: {self.tool}({args}) call {self.call_id}{note}"


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
    messages: list[Message] | None = None
    """The conversation its result or its failure's partial run holds."""

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
class RunHistory:
    """What a run's history records, across its executions."""

    workflow_id: str
    input: RunInput | None
    """The first execution's input (None: it is not a `RunInput` today; see `raw_input`)."""
    task_queue: str
    executions: list[str]
    """Temporal run ids, first to last."""
    requests: list[RecordedRequest] = field(default_factory=list[RecordedRequest])
    """Every model request, the run's own and its hooks', in the order they were scheduled."""
    tool_calls: list[RecordedToolCall] = field(default_factory=list[RecordedToolCall])
    """Every tool activity, in the order they were scheduled."""
    states: list[tuple[Position, dict[str, Any] | None]] = field(
        default_factory=list[tuple[Position, dict[str, Any] | None]])
    """Recorded contributed states (None: too large to record), in order."""
    raw_input: dict[str, Any] = field(default_factory=dict[str, Any])
    """The first execution's input as JSON, without `resume`."""
    others: dict[str, list[Any]] = field(default_factory=dict[str, list[Any]])
    """Results of other activities (an MCP server's tool list), per type, in order."""
    outcome: RecordedOutcome = field(default_factory=lambda: RecordedOutcome("running"))
    counters: Counters | None = None
    """The last ledger the history confirmed."""

    @property
    def steps(self) -> list[int]:
        """The steps whose requests the history holds, in order."""
        return sorted({r.step for r in self.requests if r.own})

    def request(self, step: int) -> RecordedRequest | None:
        """The (first) request the run made at `step`."""
        return next((r for r in self.requests if r.own and r.step == step), None)

    def state_before(self, request: RecordedRequest) -> tuple[dict[str, Any] | None, str | None]:
        """The contributed state as it was before `request` was made, and, when it is not
        known, why (a state too large to record)."""
        before = [value for pos, value in self.states if pos < request.position]
        if before:
            if before[-1] is None:
                return None, "the run's state was too large to record at that step"
            return dict(before[-1]), None
        return {}, None  # recorded from the start, and never anything

    def calls_after(self, request: RecordedRequest) -> list[RecordedToolCall]:
        """The tool calls made after `request` was scheduled (they would run again after a
        reset to its step)."""
        return [c for c in self.tool_calls if c.position > request.position]

    def conversation(self) -> list[Sent]:
        """The conversation as far as the history shows it: its result's or partial run's,
        else the last request the run made and the response it got."""
        if self.outcome.messages is not None:
            return list(self.outcome.messages)
        last = next((r for r in reversed(self.requests) if r.own), None)
        if last is None:
            return []
        return [*last.conversation, *([last.response] if last.response is not None else [])]
