"""towline's converters: pydantic payloads (undecodable untyped values kept raw), and run
failures without the worker's stack trace.

Temporal decodes a workflow's input before any workflow code runs; input that
does not decode (invalid UTF-8, a lone surrogate escape, JSON nested thousands
deep, a second `--input`) would fail the workflow *task*, which Temporal retries
forever, and the run would never end. `AgentRun` therefore takes its input
untyped (`*args`), and this converter hands an untyped value it cannot decode
over as a `RawValue` instead of raising, so the workflow can end the run with
`InvalidRunInput` saying what was wrong. Typed values decode (or fail) as usual.

A failed run's failure is what a user reads in the UI and in `RunError`: its
reason (the type), message and partial run. The Python stack trace of the
worker's internals that Temporal attaches by default says nothing about the run,
so `TowlineFailureConverter` leaves it out for `RunFailure`s (other errors, such
as an activity's exception, keep theirs).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

import google.protobuf.message
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONProtoPayloadConverter,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError

from towline.encryption.codec import DecryptionError
from towline.errors import RunFailure
from towline.messages import COMPACT
from towline.runtime.heap import paused_gc
from towline.runtime.unreadable_payloads import unreadable_reason

__all__ = [
    "TowlinePayloadConverter",
    "TowlineFailureConverter",
    "TowlineEncodedFailureConverter",
    "failure_converter_for",
    "BULK",
]


BULK = 512 * 1024
"""Payload bytes from which decoding pauses the garbage collector (`paused_gc`)."""
class _CompactJSON(PydanticJSONPlainPayloadConverter):
    """pydantic JSON, messages without their default fields (`towline.messages.COMPACT`)."""

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": self.encoding.encode()},
                       data=to_json(value, context={COMPACT: True}))


_INT64 = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                    FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                    FieldDescriptor.TYPE_SFIXED64})


class _NumericJSONProto(JSONProtoPayloadConverter):
    """`json/protobuf` as Temporal writes it, but 64-bit integers as JSON numbers, not the
    strings proto3 JSON prints them as (which every proto3 JSON parser reads as well): the
    ledger's counters (`towline.v1.RunCounters`) read `"requests": 2` beside `"runStep": 2`
    in the memo and headers, not `"requests": "2"`."""

    def to_payload(self, value: Any) -> Payload | None:
        if not isinstance(value, google.protobuf.message.Message):
            return None
        data: dict[str, Any] = json_format.MessageToDict(value)
        for field in value.DESCRIPTOR.fields:
            if field.type in _INT64 and not field.is_repeated and (
                    field.json_name in data):
                data[field.json_name] = int(data[field.json_name])
        return Payload(metadata={"encoding": self.encoding.encode(),
                                 "messageType": value.DESCRIPTOR.full_name.encode()},
                       data=json.dumps(data, separators=(",", ":"), sort_keys=True).encode())


class TowlinePayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter`; untyped payloads that fail to decode become `RawValue`.

    Messages are written without fields at their default (`towline.messages.COMPACT`):
    a history repeats them at every step, and every reader's defaults restore them.
    Protobuf messages (the ledger's counters) are `json/protobuf` with 64-bit integers as
    numbers (`_NumericJSONProto`).
    """

    def __init__(self) -> None:
        compact, numeric = _CompactJSON(), _NumericJSONProto()
        CompositePayloadConverter.__init__(self, *(
            compact if isinstance(c, JSONPlainPayloadConverter) else
            numeric if isinstance(c, JSONProtoPayloadConverter) else c
            for c in DefaultPayloadConverter.default_encoding_payload_converters
        ))

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        bulk = sum(p.ByteSize() for p in payloads) >= BULK
        with paused_gc() if bulk else contextlib.nullcontext():
            if type_hints is not None:
                for payload in payloads:  # an update's or a signal's: refused, naming why
                    if (reason := unreadable_reason(payload)) is not None:
                        raise ApplicationError(reason, type="UnreadablePayload",
                                               non_retryable=True)
                return super().from_payloads(payloads, type_hints)
            values: list[Any] = []
            for payload in payloads:
                try:
                    values.extend(super().from_payloads([payload], None))
                except Exception:  # noqa: BLE001 - the caller validates, and names the problem
                    values.append(RawValue(payload))
            return values


class TowlineFailureConverter(DefaultFailureConverter):
    """Temporal's failure converter; a `RunFailure` carries no worker stack trace."""

    def to_failure(self, exception: BaseException, payload_converter: PayloadConverter,
                   failure: Any) -> None:
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, RunFailure):
            failure.stack_trace = ""


class TowlineEncodedFailureConverter(DefaultFailureConverterWithEncodedAttributes):
    """The same, for failures whose message is encoded (encrypted) with the payload codec.

    Except a `DecryptionError`'s: it names a key id only, and must be readable by whoever
    lacks the key (`towline runs --stuck` shows why a run waits).
    """

    def to_failure(self, exception: BaseException, payload_converter: PayloadConverter,
                   failure: Any) -> None:
        if isinstance(exception, DecryptionError):
            # Encrypted, it would read "Encoded failure" to the very process that lacks the
            # key; its message names a key id only, never a key or content.
            TowlineFailureConverter().to_failure(exception, payload_converter, failure)
            return
        if isinstance(exception, RunFailure):
            exception.__traceback__ = None  # encoded attributes would carry it otherwise
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, RunFailure):
            failure.stack_trace = ""


def failure_converter_for(existing: type[Any]) -> type[Any]:
    """towline's failure converter standing in for `existing` (a custom one is kept)."""
    if existing in (DefaultFailureConverter, TowlineFailureConverter):
        return TowlineFailureConverter
    if existing in (DefaultFailureConverterWithEncodedAttributes, TowlineEncodedFailureConverter):
        return TowlineEncodedFailureConverter
    return existing
