"""The ledger: confirmed counters as `towline.v1.RunCounters`, in activity headers and the memo.

Engine 4 on, the confirmed counters ride on the events a run writes anyway: every activity
the run schedules carries them in its Temporal header `towline.counters` (a `json/protobuf`
payload, encoded by the codec like every payload: `towline.runtime.ledger_headers`), and its
result, a failure's partial run and a continue-as-new input carry the final ones. Memo key
`towline.counters` (the same payload, so the Temporal UI shows it) and the search attributes
are the *visible* counters, written at status changes, at the end and at most every
`ATTRIBUTE_STEPS` steps or `ATTRIBUTE_SECONDS` between (`workflows.run.Run.confirm`); older
runs wrote the memo at every confirmed transition. `counters_from_history` reads the
confirmed sequence back from either kind of history, exactly as recorded. A record is as
small as that encoding allows: proto3 JSON leaves out every field at its default (zero
counters, an empty `tool_retries`), compactly (`JSONProtoPayloadConverter`), about 160 bytes
of data plus the payload's `encoding` and `messageType`, which the UI and `decode_counters` read.
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
    "HEADER_ENGINE",
    "format_cost",
]

MEMO_KEY = "towline.counters"
"""The memo key of the visible counters."""
HEADER_KEY = "towline.counters"
"""The Temporal header of every activity a run schedules: the counters confirmed then."""
HEADER_ENGINE = 4
"""The engine version from which runs carry `HEADER_KEY` (and write the memo sparsely)."""


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

    Engine 4 and newer (`workflows.versions.history_engine`): the `towline.counters` header of
    each activity the run scheduled (what the runtime had confirmed before that I/O step),
    then the final counters its close event holds (the result's, a failure's partial run's, a
    continue-as-new input's). Older histories: every `towline.counters` memo snapshot (the
    start request's and each upsert). Pass every execution's events, in order, for a run that
    continued as new; decode an encrypted history first (`towline.encryption.codec.decode_history`),
    or read one whose payloads are encrypted or stored with `decoded_counters_from_history`.
    A final record that cannot be read as plain JSON (a stored reference, say) is left out.
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
            found.append(from_proto(record))
            continue
        [value] = await converter.decode([payload], [dict[str, Any]])
        counters = _at(value, path)
        if counters is not None:
            found.append(counters)
    return found


def _records(events: Iterable[HistoryEvent]) -> Iterator[Record]:
    """The ledger's records in `events`, in order (headers and finals, or memo snapshots)."""
    # imported here: `towline.workflows` (its package) imports this module as it loads
    from towline.workflows.versions import history_engine

    events = list(events)
    headers = history_engine(events) >= HEADER_ENGINE
    for event in events:
        if headers and event.HasField("activity_task_scheduled_event_attributes"):
            fields = event.activity_task_scheduled_event_attributes.header.fields
            if HEADER_KEY in fields:
                yield fields[HEADER_KEY], ()
        elif headers:
            final = _final_record(event)
            if final is not None:
                yield final
        elif event.HasField("workflow_properties_modified_event_attributes"):
            fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
            if MEMO_KEY in fields:
                yield fields[MEMO_KEY], ()
        elif event.HasField("workflow_execution_started_event_attributes"):
            fields = event.workflow_execution_started_event_attributes.memo.fields
            if MEMO_KEY in fields:
                yield fields[MEMO_KEY], ()


def latest_counters(events: Iterable[HistoryEvent]) -> Counters | None:
    """The most recent counters a history (or any part of it, in any order) records: the
    latest event holding a `towline.counters` header, memo or final counters. In a live
    engine-4 run that is the last activity's header, or the memo written at a later status
    change (a session waiting for its next message, say); in an older run its last memo snapshot.
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
    elif event.HasField("workflow_properties_modified_event_attributes"):
        payload = event.workflow_properties_modified_event_attributes.upserted_memo.fields.get(MEMO_KEY)
    elif event.HasField("workflow_execution_started_event_attributes"):
        payload = event.workflow_execution_started_event_attributes.memo.fields.get(MEMO_KEY)
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
