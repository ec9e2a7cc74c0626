"""The workflow side of a run's live events: a Workflow Stream and what the run publishes on it.

`AgentRun` builds one `RunStream` in its `@workflow.init` (Temporal's
`WorkflowStream`, which registers the stream's signal, poll update and
queries). Run code publishes with `emit(run.stream, type, **fields)`: an in-memory
append, no command and no history event, so replaying a history written
before streaming existed gives the same commands. What changes history is
only what others send: the model activity's text batches (signals) and
subscribers' polls (updates).

Before the run ends or continues as new, `close()` releases waiting
subscribers (they read the rest through the stream's query once the run is
closed, or poll the next execution); `carried()` is the stream state a
continued execution starts from, its oldest events dropped past
`CARRY_BYTES` so the carried input stays small (offsets go on regardless).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.contrib.workflow_streams import (
    PollInput,
    PollResult,
    WorkflowStream,
    WorkflowStreamState,
)

from towline.events import EVENTS_TOPIC, EventType, response_fields
from towline.messages import ModelResponse

__all__ = ["RunStream", "emit", "emit_response", "prior_stream_state", "CARRY_BYTES"]

CARRY_BYTES = 256_000
"""Bytes of retained events a continued execution carries over (older ones are dropped)."""

_STATE = TypeAdapter(WorkflowStreamState)


class RunStream(WorkflowStream):
    """Temporal's `WorkflowStream`, counting subscribers' polls in flight.

    `AgentRun` must not end or continue as new while a poll update is still
    running (it would be abandoned), and a waiting poll must not count as work
    in flight (a watched run would never continue as new).
    """

    polls: int = 0
    """Poll updates currently waiting for events."""

    async def _on_poll(self, payload: PollInput) -> PollResult:
        self.polls += 1
        try:
            return await super()._on_poll(payload)  # pyright: ignore[reportPrivateUsage]
        finally:
            self.polls -= 1

    def publish(self, kind: EventType, **fields: Any) -> None:
        """Append an event of type `kind` (None fields are left out); never fails the run."""
        event = {"type": kind.value, **{k: v for k, v in fields.items() if v is not None}}
        try:
            self.topic(EVENTS_TOPIC).publish(event)
        except Exception as e:  # noqa: BLE001 - a value the converter refuses: the event is dropped
            workflow.logger.warning("event %s not published: %s", kind, e)

    async def close(self) -> None:
        """Release waiting subscribers and wait until their polls have returned."""
        self.detach_pollers()
        await workflow.wait_condition(lambda: self.polls == 0)

    def carried(self) -> WorkflowStreamState:
        """The state a continued execution starts from (oldest events dropped past CARRY_BYTES)."""
        state = self.get_state()
        size = 0
        keep = len(state.log)
        while keep > 0 and size + len(state.log[keep - 1].data) <= CARRY_BYTES:
            size += len(state.log[keep - 1].data)
            keep -= 1
        if keep:
            self.truncate(state.base_offset + keep)
            state = self.get_state()
        return state


def emit(stream: RunStream | None, kind: EventType, /, **fields: Any) -> None:
    """Publish an event on the run's `stream` (`Run.stream`; None: nowhere)."""
    if stream is not None:
        stream.publish(kind, **fields)


def emit_response(stream: RunStream | None, step: int, response: ModelResponse) -> None:
    """Publish the `response` event of a committed turn (`towline.events.response_fields`)."""
    emit(stream, EventType.RESPONSE, **response_fields(step, response))


def prior_stream_state(args: Sequence[Any]) -> WorkflowStreamState | None:
    """The stream state a continued execution's raw input carries, if any (never raises).

    Read before the input is decoded (the stream is built in `@workflow.init`);
    input that does not decode is reported by the run itself, as `InvalidRunInput`.
    """
    first: Any = args[0] if len(args) == 1 else None
    if not isinstance(first, dict):
        return None
    resume: Any = first.get("resume")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    raw: Any = resume.get("stream") if isinstance(resume, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if raw is None:
        return None
    try:
        return _STATE.validate_python(raw)
    except ValidationError:
        return None
