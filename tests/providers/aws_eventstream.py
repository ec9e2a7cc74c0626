"""AWS's binary event-stream framing, as Bedrock streams a Claude answer.

`POST /model/<model>/invoke-with-response-stream` is answered not with server-sent
events but with `application/vnd.amazon.eventstream` messages. Each message is

    total length (4 bytes) | headers length (4) | CRC32 of those 8 bytes (4)
    | headers | payload | CRC32 of everything before it (4)

all big-endian; a header is a 1-byte name length, the name, a type byte (7: a
string) and a 2-byte value length with the value. Bedrock's answer is one `chunk`
event per Anthropic streaming event (`:event-type` `chunk`, `:content-type`
`application/json`, `:message-type` `event`), whose payload is
`{"bytes": "<base64 of the event's JSON>", "p": "<padding>"}`: the padding, of a
varying length, hides the size of the text. The last event, `message_stop`, carries
Bedrock's `amazon-bedrock-invocationMetrics`. An error after the 200 status line is
an `exception` message (`:message-type` `exception`, `:exception-type` one of the
`ResponseStream` exceptions, e.g. `throttlingException`) with `{"message": ...}`.

This is what the SDK's decoder (`anthropic.lib.bedrock._stream_decoder`, on
botocore's `EventStreamBuffer` and `EventStreamJSONParser`) reads, checksums included.
"""

from __future__ import annotations

import base64
import json
import struct
from binascii import crc32
from typing import Any

from sse import Event, anthropic_events

__all__ = ["frame", "chunk", "exception", "encode", "bedrock_events", "CONTENT_TYPE"]

CONTENT_TYPE = "application/vnd.amazon.eventstream"

_STRING = 7
"""The header value type of a UTF-8 string."""
_PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return struct.pack("!B", len(key)) + key + struct.pack("!BH", _STRING, len(text)) + text


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude, prelude CRC, headers, payload, message CRC."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack("!II", 12 + len(head) + len(payload) + 4, len(head))
    message = prelude + struct.pack("!I", crc32(prelude) & 0xFFFFFFFF) + head + payload
    return message + struct.pack("!I", crc32(message) & 0xFFFFFFFF)


def chunk(data: Any) -> bytes:
    """A `chunk` event carrying one Anthropic streaming event (its JSON, base64 in `bytes`)."""
    raw = (data if isinstance(data, str) else json.dumps(data)).encode()
    padding = _PADDING[:1 + (7 * len(raw)) % len(_PADDING)]
    payload = json.dumps({"bytes": base64.b64encode(raw).decode(), "p": padding}).encode()
    return frame({":event-type": "chunk", ":content-type": "application/json",
                  ":message-type": "event"}, payload)


def exception(kind: str, message: str) -> bytes:
    """An exception message sent mid-stream (e.g. `throttlingException`, `validationException`)."""
    return frame({":exception-type": kind, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())


def bedrock_events(message: dict[str, Any]) -> list[Event]:
    """The Anthropic streaming events Bedrock sends for `message` (`sse.anthropic_events`), the
    last with Bedrock's invocation metrics."""
    events = anthropic_events(message)
    name, stop = events[-1]
    usage = message["usage"]
    metrics = {"inputTokenCount": usage["input_tokens"], "outputTokenCount": usage["output_tokens"],
               "invocationLatency": 1200, "firstByteLatency": 400}
    return [*events[:-1], (name, {**stop, "amazon-bedrock-invocationMetrics": metrics})]


def encode(event: Event) -> bytes:
    """One event on the wire: a `chunk` for an Anthropic event; a `(":exception", (kind, message))`
    event is sent as an exception message."""
    name, data = event
    if name == ":exception":
        kind, text = data
        return exception(str(kind), str(text))
    return chunk(data)
