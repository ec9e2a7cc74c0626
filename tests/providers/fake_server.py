"""A local HTTP server that answers like a model provider, from scripted replies.

Started on 127.0.0.1 on a free port by the `provider` fixture (`conftest.py`
beside this file). The real SDKs talk to it over HTTP exactly as they would to
the provider, so what the tests check is the wire format both ways: each
request the SDK sent is recorded (path, headers, JSON body), and each reply is
a status, headers and a JSON body taken from a recorded exchange
(`exchanges/*.json`) or made by the test. A request that asks to stream
(`"stream": true`) gets the same answer as the provider streams it: server-sent
events in the provider's format (`sse.py`), or Bedrock's AWS event stream for its
`/invoke-with-response-stream` path (`aws_eventstream.py`), optionally spaced out in time.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sse import Event, encode, sse_events

__all__ = ["Reply", "Recorded", "FakeProvider", "load_exchange", "check_exchange", "EXCHANGES"]

RECORD_ENV = "TOWLINE_RECORD_EXCHANGES"
"""Set to 1 to write the requests a test's run sent into its exchange file (then review them)."""

EXCHANGES = Path(__file__).resolve().parent / "exchanges"


@dataclass
class Reply:
    """One scripted answer."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict[str, str])
    delay: float = 0.0
    """Seconds to wait before answering (a slow provider)."""
    events: list[Event] | None = None
    """Streaming: the events to send instead of those made from `body`."""
    gap: float = 0.0
    """Streaming: seconds between two events (a model generating)."""
    cut_after: int | None = None
    """Streaming: drop the connection after this many events (a broken stream)."""
    raw: bytes | None = None
    """The body exactly as a real API sent it (a recording): written byte for byte, as JSON or,
    when it is a stream of server-sent events, as `text/event-stream`."""


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    """`time.monotonic()` when it arrived."""
    refused: bool = False
    """A wire rule refused it (`FakeProvider.rules`)."""


Scripted = Reply | Callable[[Recorded], Reply]


def load_exchange(name: str) -> list[dict[str, Any]]:
    """The steps of a recorded exchange: `[{"request": ..., "reply": ...}, ...]`."""
    steps: list[dict[str, Any]] = json.loads((EXCHANGES / f"{name}.json").read_text())
    return steps


def check_exchange(server: FakeProvider, name: str) -> None:
    """Assert the requests received are exactly the exchange's recorded requests, in order.

    With `TOWLINE_RECORD_EXCHANGES=1` the file's requests are rewritten from this run
    instead (for a reviewer to read), and the test fails so that it is not mistaken for a pass.
    """
    path = EXCHANGES / f"{name}.json"
    steps = load_exchange(name)
    seen = [{"path": r.path, "body": body} for r, body in
            zip(server.requests, _run_key([r.body for r in server.requests]), strict=True)]
    if os.environ.get(RECORD_ENV) == "1":
        for step, request in zip(steps, seen, strict=True):
            step["request"] = request
        path.write_text(json.dumps(steps, indent=2) + "\n")
        raise AssertionError(f"recorded {path.name}: review it and run again without {RECORD_ENV}")
    assert seen == [s["request"] for s in steps]


RUN_KEY = "<the run's prompt_cache_key>"
"""What an exchange file records for an OpenAI `prompt_cache_key` (it hashes the run's random
workflow id)."""


def _run_key(bodies: list[Any]) -> list[Any]:
    """`bodies` with their `prompt_cache_key` as `RUN_KEY`, once checked to be one key for the run."""
    keyed = [b for b in bodies if isinstance(b, dict) and "prompt_cache_key" in b]
    keys = {b["prompt_cache_key"] for b in keyed}
    assert len(keys) <= 1, f"one run's requests sent different prompt_cache_keys: {keys}"
    return [{**b, "prompt_cache_key": RUN_KEY} if b in keyed else b for b in bodies]


class FakeProvider:
    """A threaded HTTP server answering every POST (and GET) with the next scripted reply."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._script: list[Scripted] = []
        self.rules: list[Callable[[Recorded], Reply | None]] = []
        """The provider's wire rules: each sees every request first and may refuse it with the
        error reply the real API gives (then no scripted reply is used up)."""
        self.handlers: list[Callable[[Recorded], Reply | None]] = []
        """Stateful endpoints (a background response's poll, say): after the rules, each may
        answer a request it knows (then no scripted reply is used up either)."""
        self._lock = threading.Lock()
        # bound here, on a port the OS picks: no other process can take it in between
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port: int = self._server.server_address[1]
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeProvider:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, *replies: Scripted) -> None:
        """Queue replies, answered in order."""
        with self._lock:
            self._script.extend(replies)

    def play(self, name: str) -> list[dict[str, Any]]:
        """Queue the replies of a recorded exchange; returns its steps."""
        steps = load_exchange(name)
        self.script(*(Reply(body=s["reply"]["body"], status=s["reply"].get("status", 200),
                            headers=s["reply"].get("headers", {})) for s in steps))
        return steps

    def bodies(self) -> list[Any]:
        """The JSON bodies of the requests received, in order."""
        return [r.body for r in self.requests]

    def refusals(self) -> list[Recorded]:
        """The requests a rule refused."""
        return [r for r in self.requests if r.refused]

    def _next(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            for rule in self.rules:
                refused = rule(recorded)
                if refused is not None:
                    recorded.refused = True
                    return refused
            for handler in self.handlers:
                answered = handler(recorded)
                if answered is not None:
                    return answered
            if not self._script:
                return Reply({"error": {"message": "the fake provider has no scripted reply",
                                        "type": "test_error"}}, status=599)
            scripted = self._script.pop(0)
        return scripted(recorded) if callable(scripted) else scripted

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.do_POST()  # recorded and answered the same way (a body-less request)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                recorded = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                    body, time.monotonic())
                reply = provider._next(recorded)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    self._raw(reply, reply.raw)
                    return
                streams = (isinstance(body, dict) and body.get("stream")) or (
                    ":streamGenerateContent" in self.path) or (  # Gemini streams by its URL
                    self.path.split("?", 1)[0].endswith("/invoke-with-response-stream"))  # Bedrock
                if reply.status == 200 and streams:
                    self._stream(reply)
                    return
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a killed worker)
                    pass

            def _raw(self, reply: Reply, data: bytes) -> None:
                sse = data.lstrip().startswith((b"event:", b"data:"))
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream; charset=utf-8" if sse
                                 else "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply) -> None:
                events, write, kind = reply.events, encode, "text/event-stream; charset=utf-8"
                if ":streamGenerateContent" in self.path:  # Gemini frames its chunks its own way
                    from gemini_server import gemini_encode, gemini_events

                    events, write = events if events is not None else gemini_events(reply.body), gemini_encode
                elif self.path.split("?", 1)[0].endswith("/invoke-with-response-stream"):
                    from aws_eventstream import CONTENT_TYPE, bedrock_events
                    from aws_eventstream import encode as aws_encode  # AWS's binary frames

                    events = events if events is not None else bedrock_events(reply.body)
                    write, kind = aws_encode, CONTENT_TYPE
                elif events is None:
                    events = sse_events(self.path, reply.body)
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.close_connection = True
                try:
                    for i, event in enumerate(events):
                        if reply.cut_after is not None and i >= reply.cut_after:
                            break
                        if i and reply.gap:
                            time.sleep(reply.gap)
                        self.wfile.write(write(event))
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                del format, args  # quiet: pytest shows the test's own output

        return Handler
