"""The ledger: confirmed counters as `towline.v1.RunCounters`, in activity headers and the memo.

The confirmed counters ride on the events a run writes anyway: every activity
the run schedules carries them in its Temporal header `towline.counters` (a `json/protobuf`
payload, encoded by the codec like every payload: `towline.runtime.ledger_headers`), and its
result, a failure's partial run and a continue-as-new input carry the final ones. Memo key
`towline.counters` (the same payload, so the Temporal UI shows it) and the search attributes
are the *visible* counters, written at status changes, at the end and at most every
`ATTRIBUTE_STEPS` steps or `ATTRIBUTE_SECONDS` between (`workflows.ledger.Ledger.confirm`).
`counters_from_history` reads the confirmed sequence back from a history, exactly as recorded. A record is as
small as that encoding allows: proto3 JSON leaves out every field at its default (zero
counters, an empty `tool_retries`), compactly (`JSONProtoPayloadConverter`), about 130 bytes
of data plus the payload's `encoding` and `messageType`, which the UI and `decode_counters` read.
Histories written before 1.0 by engines older than the headers kept memo snapshots instead;
`counters_from_history` still reads those, as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf import json_format
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter, JSONProtoPayloadConverter

from towline.proto.towline.v1.ledger_pb2 import RunCounters
from towline.results import Counters

__all__ = [
    "MEMO_KEY",
    "RunCounters",
    "RECORD_FIELDS",
    "to_proto",
    "from_proto",
    "decode_counters",
    "counters_from_history",
    "decoded_counters_from_history",
    "final_counters",
    "latest_counters",
    "HEADER_KEY",
    "format_cost",
]

MEMO_KEY = "towline.counters"
"""The memo key of the visible counters."""
HEADER_KEY = "towline.counters"
"""The Temporal header of every activity a run schedules: the counters confirmed then."""


RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in RunCounters.DESCRIPTOR.fields)
"""The fields of a ledger record, as `ledger.proto` (the wire definition) declares them; they
are `Counters`' fields, one for one (a test checks)."""


def to_proto(counters: Counters) -> RunCounters:
    """The ledger record of `counters` (an unset optional field: None, left out)."""
    return RunCounters(**{name: getattr(counters, name) for name in RECORD_FIELDS})


def from_proto(record: RunCounters) -> Counters:
    """`Counters` from a ledger record, read as written (never migrated)."""
    data: dict[str, Any] = json_format.MessageToDict(
        record, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return Counters.model_validate(data)


def decode_counters(payload: Payload) -> Counters:
    """Decode one `towline.counters` memo payload."""
    value = JSONProtoPayloadConverter().from_payload(payload, RunCounters)
    return from_proto(value)


Record = tuple[Payload, tuple[str, ...]]
"""Where a history holds counters: a payload, and the path to them inside it (empty: the
payload is a `RunCounters` record; else a JSON document with the counters at that path)."""


def counters_from_history(events: Iterable[HistoryEvent]) -> list[Counters]:
    """The confirmed counters a workflow history records, in order, read as written.

    The `towline.counters` header of each activity the run scheduled (what the runtime had
    confirmed before that I/O step), then the final counters its close event holds (the
    result's, a failure's partial run's, a continue-as-new input's). Pass every execution's events, in order, for a run that
    continued as new; decode an encrypted history first (`towline.encryption.codec.decode_history`),
    or read one whose payloads are encrypted or stored with `decoded_counters_from_history`.
    A final record that cannot be read as plain JSON (a stored reference, say) is left out.
    A history written before 1.0 without headers (its engine kept memo snapshots) gives
    every `towline.counters` memo snapshot instead: the start request's and each upsert.
    """
    found: list[Counters] = []
    for payload, path in _records(events):
        counters = decode_counters(payload) if not path else _plain_final(payload, path)
        if counters is not None:
            found.append(counters)
    return found


async def decoded_counters_from_history(events: Iterable[HistoryEvent],
                                        converter: DataConverter) -> list[Counters]:
    """`counters_from_history`, each record decoded by `converter` (its codec, and its
    external storage: a result too large for the history is read from the payload store)."""
    found: list[Counters] = []
    for payload, path in _records(events):
        if not path:
            [record] = await converter.decode([payload], [RunCounters])
            counters: Counters | None = from_proto(record)
        else:
            [value] = await converter.decode([payload], [dict[str, Any]])
            counters = _at(value, path)
        if counters is not None:
            found.append(counters)
    return found


def _records(events: Iterable[HistoryEvent]) -> Iterator[Record]:
    """The ledger's records in `events`, in order: activity headers and finals, or, in a
    history from before the headers (`_memo_snapshots`), the memo snapshots."""
    events = list(events)
    if _memo_snapshots(events):
        for event in events:
            payload = _memo_of(event)
            if payload is not None:
                yield payload, ()
        return
    for event in events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            fields = event.activity_task_scheduled_event_attributes.header.fields
            if HEADER_KEY in fields:
                yield fields[HEADER_KEY], ()
        else:
            final = _final_record(event)
            if final is not None:
                yield final


def _memo_of(event: HistoryEvent) -> Payload | None:
    """The `towline.counters` memo an event writes (the start request's, or an upsert's)."""
    if event.HasField("workflow_properties_modified_event_attributes"):
        return event.workflow_properties_modified_event_attributes.upserted_memo.fields.get(MEMO_KEY)
    if event.HasField("workflow_execution_started_event_attributes"):
        return event.workflow_execution_started_event_attributes.memo.fields.get(MEMO_KEY)
    return None


def _memo_snapshots(events: list[HistoryEvent]) -> bool:
    """Whether a history is one of a pre-1.0 engine that kept the ledger in memo snapshots: it
    schedules activities, none with a `towline.counters` header, and upserts the memo."""
    scheduled = [e.activity_task_scheduled_event_attributes for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    if not scheduled or any(HEADER_KEY in a.header.fields for a in scheduled):
        return False
    return any(e.HasField("workflow_properties_modified_event_attributes") and _memo_of(e) is not None
               for e in events)


def latest_counters(events: Iterable[HistoryEvent]) -> Counters | None:
    """The most recent counters a history (or any part of it, in any order) records: the
    latest event holding a `towline.counters` header, memo or final counters. In a live run
    that is the last activity's header, or the memo written at a later status change (a
    session waiting for its next message, say).
    """
    found: tuple[int, Counters] | None = None
    for event in events:
        counters = _record_of(event)
        if counters is not None and (found is None or event.event_id > found[0]):
            found = (event.event_id, counters)
    return found[1] if found is not None else None


def _record_of(event: HistoryEvent) -> Counters | None:
    """The counters one event holds (header, memo or final), if any and readable."""
    payload: Payload | None = None
    if event.HasField("activity_task_scheduled_event_attributes"):
        payload = event.activity_task_scheduled_event_attributes.header.fields.get(HEADER_KEY)
    elif (event.HasField("workflow_properties_modified_event_attributes")
          or event.HasField("workflow_execution_started_event_attributes")):
        payload = _memo_of(event)
    else:
        return final_counters(event)
    if payload is None:
        return None
    try:
        return decode_counters(payload)
    except Exception:  # noqa: BLE001 - still encrypted, say: not a record this reader can use
        return None


def final_counters(event: HistoryEvent) -> Counters | None:
    """The final counters a close event holds: the result's (`RunResult.counters`), the failed
    run's partial (`partial.counters`), or the continue-as-new input's (`resume.counters`); None
    for any other event, or where the payload cannot be read as plain JSON."""
    final = _final_record(event)
    return _plain_final(*final) if final is not None else None


def _final_record(event: HistoryEvent) -> Record | None:
    """Where a close event holds the run's final counters."""
    if event.HasField("workflow_execution_completed_event_attributes"):
        payloads = event.workflow_execution_completed_event_attributes.result.payloads
        return (payloads[0], ("counters",)) if payloads else None
    if event.HasField("workflow_execution_failed_event_attributes"):
        info = event.workflow_execution_failed_event_attributes.failure.application_failure_info
        details = info.details.payloads
        return (details[0], ("counters",)) if details else None
    if event.HasField("workflow_execution_continued_as_new_event_attributes"):
        payloads = event.workflow_execution_continued_as_new_event_attributes.input.payloads
        return (payloads[0], ("resume", "counters")) if payloads else None
    return None


def _plain_final(payload: Payload, path: tuple[str, ...]) -> Counters | None:
    if payload.metadata.get("encoding") != b"json/plain":
        return None
    try:
        return _at(json.loads(payload.data), path)
    except ValueError:
        return None


def _at(value: Any, path: tuple[str, ...]) -> Counters | None:
    """The counters at `path` in a decoded JSON document, if they are there and valid."""
    try:
        for key in path:
            value = value[key]
        return Counters.model_validate(value)
    except (KeyError, TypeError, IndexError, ValidationError):
        return None


def format_cost(cost_micros: int | None, unpriced_requests: int = 0) -> str:
    """`$0.001234`; `at least $0.001234 (2 requests of unknown price)`; `no price known (2
    requests)` when no request had a price (a local model); `none recorded`."""
    if cost_micros is None:
        return "none recorded (offline models only)"
    dollars = f"${cost_micros / 1_000_000:.6f}"
    if not unpriced_requests:
        return dollars
    noun = "request" if unpriced_requests == 1 else "requests"
    if cost_micros == 0:  # nothing was priced: "at least $0" would read as free
        return f"no price known ({unpriced_requests} {noun})"
    return f"at least {dollars} ({unpriced_requests} {noun} of unknown price)"
