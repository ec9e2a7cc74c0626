"""A finished run's events read from its history, for when no worker can read its stream back.

A run's live events are its Workflow Stream (`towline.events`), held in the workflow's memory:
once the run has closed, only a worker replaying it can answer the stream's query. Without
one, `events_from_history` gives the events its record shows (`towline.replay.run_history`):
the run's start, each of its steps with the model's response, each tool call with its
return, and its result or failure, with the fields the live events have
(`towline.events.response_fields`, `tool_end_fields`). What only the stream had is left out:
the streamed text and thinking (previews; the `response` event is the record), approvals and
decisions, a session's messages and answers. The events are not from a stream, so their
`offset` is -1.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from towline.activities.io import ToolActivityResult
from towline.events import RunEvent, preview, response_fields, tool_end_fields
from towline.messages import ToolReturnPart, prompt_text
from towline.replay.records import RecordedToolCall, RunHistory

__all__ = ["events_from_history"]


def _event(kind: str, **fields: Any) -> RunEvent:
    return RunEvent.model_validate({"type": kind, **{k: v for k, v in fields.items()
                                                     if v is not None}})


def _tool_end(call: RecordedToolCall) -> RunEvent | None:
    """The `tool_end` of a call whose activity returned (its result as the activity gave it)."""
    if call.ended != "completed":
        return None
    try:
        result = ToolActivityResult.model_validate(call.result)
    except ValidationError:
        return None
    ret = ToolReturnPart(tool_name=call.tool, tool_call_id=call.call_id, content=result.content,
                         status=result.status)
    return _event("tool_end", **tool_end_fields(call.step, ret))


def events_from_history(run: RunHistory) -> list[RunEvent]:
    """The events `run`'s history shows, in the order the run published them."""
    inp = run.input
    own = [r for r in run.requests if r.own]
    settings = own[0].definitions.settings if own and own[0].definitions else None
    events = [_event("run", agent=inp.agent if inp else run.raw_input.get("agent"),
                     model=own[0].model if own else None,
                     streaming=settings.stream if settings is not None else None,
                     prompt=preview(prompt_text(inp.prompt)) if inp and inp.prompt else None,
                     session=(inp.session or None) if inp else None)]
    for request in own:
        events.append(_event("step", step=request.step, model=request.model))
        if request.response is not None:
            events.append(_event("response", **response_fields(request.step, request.response)))
        for call in (c for c in run.tool_calls if c.step == request.step):
            events.append(_event("tool_start", step=call.step, call_id=call.call_id,
                                 tool=call.tool, args=call.args))
            end = _tool_end(call)
            if end is not None:
                events.append(end)
    outcome = run.outcome
    if outcome.status == "succeeded":
        counters = run.counters.model_dump(mode="json") if run.counters else None
        events.append(_event("result", output=outcome.output, counters=counters))
    elif outcome.status == "failed":
        events.append(_event("failed", reason=outcome.reason, message=outcome.message))
    return events
