"""Reading the benchmarks' histories back: the events of every execution of a run, their
bytes by activity payload, by event type and per execution, and the payloads inside events
(the payload store's references among them).

Apart from `harness` (the agent and the processes), so that the chaos bench's store
module reads references without the benchmark agent's worker code.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import Message as Proto
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from towline.runtime.ledger import MEMO_KEY, counters_from_history, decode_counters
from towline.testing import execution_histories

__all__ = ["REFERENCE", "payloads_in", "executions", "payload_bytes", "event_bytes", "part_bytes",
           "per_execution"]

REFERENCE = b"temporal.api.sdk.v1.ExternalStorageReference"
"""The `messageType` of a payload that stands for one kept in the payload store."""


def payloads_in(message: Proto) -> Iterator[Payload]:
    """Every `Payload` inside a protobuf message (an event), at any depth."""
    if isinstance(message, Payload):
        yield message
        return
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.is_repeated:
            items = value.values() if descriptor.message_type.GetOptions().map_entry else value
            for item in items:
                if isinstance(item, Proto):
                    yield from payloads_in(item)
        else:
            yield from payloads_in(value)


async def executions(client: Client, workflow_id: str) -> list[list[HistoryEvent]]:
    """The events of every execution of a workflow, first to last (following continue-as-new)."""
    return [list(h.events) for h in await execution_histories(client, workflow_id)]


def payload_bytes(events: list[HistoryEvent]) -> dict[str, list[int]]:
    """Bytes of each activity input and result, by `model|tool in|out`, in order."""
    kinds: dict[int, str] = {}
    found: dict[str, list[int]] = {}
    for e in events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            a = e.activity_task_scheduled_event_attributes
            kind = "model" if "model" in a.activity_type.name else "tool"
            kinds[e.event_id] = kind
            found.setdefault(f"{kind} in", []).append(a.input.ByteSize())
        elif e.HasField("activity_task_completed_event_attributes"):
            a = e.activity_task_completed_event_attributes
            kind = kinds.get(a.scheduled_event_id, "?")
            found.setdefault(f"{kind} out", []).append(a.result.ByteSize())
    return found


def event_bytes(events: list[HistoryEvent]) -> dict[str, int]:
    """Bytes of a history by event type (`ACTIVITY_TASK_SCHEDULED`, ...)."""
    found: collections.Counter[str] = collections.Counter()
    for e in events:
        found[EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")] += e.ByteSize()
    return dict(found)


def part_bytes(events: list[HistoryEvent]) -> dict[str, int]:
    """Bytes of a history by event type and part: an activity's `header`, `input` and
    `summary` (model or tool), its `result`, the run's result, and the `rest` of each event
    type (Temporal's own fields)."""
    found: collections.Counter[str] = collections.Counter()
    kinds: dict[int, str] = {}
    for e in events:
        kind = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
        parts: dict[str, int] = {}
        if e.HasField("activity_task_scheduled_event_attributes"):
            a = e.activity_task_scheduled_event_attributes
            who = kinds[e.event_id] = "model" if "model" in a.activity_type.name else "tool"
            parts = {f"{who} header": a.header.ByteSize(), f"{who} input": a.input.ByteSize(),
                     f"{who} summary": e.user_metadata.ByteSize()}
        elif e.HasField("activity_task_completed_event_attributes"):
            a = e.activity_task_completed_event_attributes
            parts = {f"{kinds.get(a.scheduled_event_id, '?')} result": a.result.ByteSize()}
        elif e.HasField("workflow_execution_completed_event_attributes"):
            parts = {"run result": e.workflow_execution_completed_event_attributes.result.ByteSize()}
        for part, size in parts.items():
            found[f"{kind}: {part}"] += size
        found[f"{kind}: rest"] += e.ByteSize() - sum(parts.values())
    return dict(found)


def per_execution(chain: list[list[HistoryEvent]]) -> list[dict[str, Any]]:
    """Steps, events, bytes, start input and bytes per step of each execution of a run."""
    rows: list[dict[str, Any]] = []
    for events in chain:
        counters = counters_from_history(events)
        # from the counters the execution started with (its start memo: a continued one's are
        # the previous execution's last), else from nothing
        memo = events[0].workflow_execution_started_event_attributes.memo.fields
        begin = decode_counters(memo[MEMO_KEY]).run_step if MEMO_KEY in memo else 0
        steps = counters[-1].run_step - begin if counters else 0
        size = sum(e.ByteSize() for e in events)
        start = events[0].workflow_execution_started_event_attributes.input.ByteSize()
        rows.append({"steps": steps, "bytes": size, "events": len(events), "start_input": start,
                     "bytes_per_step": round(size / steps) if steps else None})
    return rows
