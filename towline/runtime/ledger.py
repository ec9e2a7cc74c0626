"""The ledger: confirmed counters as `towline.v1.RunCounters`, in memo and search attributes.

The workflow upserts memo key `towline.counters` (a `json/protobuf` payload, so
the Temporal UI shows it) at every confirmed transition. `counters_from_history`
reads the sequence back from a workflow history, exactly as recorded. The snapshot
is as small as that encoding allows: proto3 JSON leaves out every field at its default
(zero counters, an empty `tool_retries`), compactly (`JSONProtoPayloadConverter`), about
160 bytes of data plus the payload's `encoding` and `messageType`, which the UI and
`decode_counters` read. The search attributes are upserted only when they change
meaningfully (`workflows.run.Run.confirm`); the memo is the exact, live record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import JSONProtoPayloadConverter

from towline.proto.towline.v1.ledger_pb2 import RunCounters
from towline.results import Counters

__all__ = [
    "MEMO_KEY",
    "RunCounters",
    "to_proto",
    "from_proto",
    "decode_counters",
    "counters_from_history",
    "format_cost",
]

MEMO_KEY = "towline.counters"


def to_proto(counters: Counters) -> RunCounters:
    """The ledger record of `counters`."""
    return RunCounters(
        tool_retries=dict(counters.tool_retries),
        output_retries_used=counters.output_retries_used,
        run_step=counters.run_step,
        tool_calls=counters.tool_calls,
        max_steps=counters.max_steps,
        output_retries=counters.output_retries,
        requests=counters.requests,
        input_tokens=counters.input_tokens,
        output_tokens=counters.output_tokens,
        schema_version=counters.schema_version,
        cost_micros=counters.cost_micros,
        unpriced_requests=counters.unpriced_requests,
        agent_version=counters.agent_version,
    )


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


def counters_from_history(events: Iterable[HistoryEvent]) -> list[Counters]:
    """Every `towline.counters` snapshot a workflow history records, in order."""
    found: list[Counters] = []
    for event in events:
        fields = None
        if event.HasField("workflow_properties_modified_event_attributes"):
            fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
        elif event.HasField("workflow_execution_started_event_attributes"):
            fields = event.workflow_execution_started_event_attributes.memo.fields
        if fields is not None and MEMO_KEY in fields:
            found.append(decode_counters(fields[MEMO_KEY]))
    return found


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
