"""Helpers for the observability tests: an agent with two tools and one hook, an OTLP/HTTP
receiver on loopback, span trees, Prometheus scrapes, and a lock for fixed README ports."""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from towline import Agent, Capability, ModelRequestState, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
)
from towline.models import FunctionModel, ModelInfo

__all__ = [
    "SpanRecord",
    "OtlpReceiver",
    "Toggle",
    "records",
    "tree_lines",
    "traced_agent",
    "scrape",
    "metric_value",
    "fixed_ports",
    "trace_of",
    "wait_for",
    "http",
]


@dataclass
class SpanRecord:
    """One span, as an exporter or the OTLP receiver saw it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    start: int
    kind: str = ""
    children: list[SpanRecord] = field(default_factory=list["SpanRecord"])


def records(spans: Sequence[ReadableSpan]) -> list[SpanRecord]:
    """In-memory exporter spans as records."""
    out: list[SpanRecord] = []
    for s in spans:
        ctx = s.get_span_context()
        assert ctx is not None
        out.append(SpanRecord(
            name=s.name, trace_id=f"{ctx.trace_id:032x}", span_id=f"{ctx.span_id:016x}",
            parent_id=f"{s.parent.span_id:016x}" if s.parent is not None else None,
            attributes=dict(s.attributes or {}), start=s.start_time or 0, kind=s.kind.name,
        ))
    return out


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    """A minimal OTLP/HTTP traces receiver (protobuf `ExportTraceServiceRequest` on /v1/traces)."""

    def __init__(self, port: int = 0) -> None:
        self.spans: list[SpanRecord] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(SpanRecord(
                            name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex() or None,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            start=s.start_time_unix_nano, kind=str(s.kind),
                        ))

    def snapshot(self) -> list[SpanRecord]:
        with self._lock:
            return list(self.spans)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class Toggle(SpanExporter):
    """Forwards spans to `inner` only while `on` (the process's provider outlives a test)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.on = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export(spans) if self.on else SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def trace_of(spans: Sequence[SpanRecord], root_name: str) -> list[SpanRecord]:
    """The spans of the trace whose root (or topmost span) is named `root_name`."""
    roots = [s for s in spans if s.name == root_name]
    assert len(roots) == 1, [s.name for s in roots]
    return [s for s in spans if s.trace_id == roots[0].trace_id]


def tree_lines(spans: Sequence[SpanRecord], *, by_start: bool = False) -> list[str]:
    """The spans as an indented tree, one line per span.

    Siblings are ordered by name (deterministic: parallel tool calls, and spans a replay
    restarted at workflow time, have no meaningful order), or by start time if asked.
    """
    by_id = {s.span_id: SpanRecord(**{**s.__dict__, "children": []}) for s in spans}
    roots: list[SpanRecord] = []
    key = (lambda r: (r.start, r.name)) if by_start else (lambda r: (r.name, r.start))
    for s in sorted(by_id.values(), key=key):
        parent = by_id.get(s.parent_id or "")
        (parent.children if parent is not None else roots).append(s)
    lines: list[str] = []

    def walk(node: SpanRecord, depth: int) -> None:
        lines.append("  " * depth + node.name)
        for child in node.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines


# --- an agent with two tools and one hook ---------------------------------------------------

@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


class Audit(Capability):
    """One hook: looks at each request (and changes nothing)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return state


def _arith(messages: list[Message], info: ModelInfo) -> ModelResponse:
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        results = [p.content for p in last.parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart(content=f"The results are {results}.")],
                             usage=Usage(requests=1, input_tokens=40, output_tokens=9),
                             finish_reason="stop")
    return ModelResponse(parts=[
        ToolCallPart(tool_name="add", args={"a": 2, "b": 3}, tool_call_id="c-add"),
        ToolCallPart(tool_name="multiply", args={"a": 6, "b": 7}, tool_call_id="c-mul"),
    ], usage=Usage(requests=1, input_tokens=30, output_tokens=12), finish_reason="tool_calls")


def traced_agent(name: str) -> Agent:
    """Two tools called in one step, then an answer; one capability with one hook."""
    return Agent(name=name, model=FunctionModel(_arith, model_name=f"{name}-model"),
                 tools=[add, multiply], capabilities=[Audit])


# --- metrics ----------------------------------------------------------------------------------

def scrape(port: int, host: str = "127.0.0.1") -> str:
    """The Prometheus endpoint's text."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The sum of `name` samples whose labels include `labels` (None if there is none)."""
    total: float | None = None
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, rest = head.partition("{")
        if metric != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total = (total or 0.0) + float(value)
    return total


@contextlib.contextmanager
def fixed_ports() -> Iterator[None]:
    """Serialise tests that bind the README's fixed ports, across processes on this machine."""
    path = Path("/tmp/towline-readme-fixed-ports.lock")
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wait_for(probe: Any, what: str, timeout: float = 60) -> Any:
    """Poll a sync probe until truthy (bounded; never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"never observed: {what}")


# --- HTTP ----------------------------------------------------------------------------------


def http(url: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request (POST when there is a body); (status, headers, body), errors included."""
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
