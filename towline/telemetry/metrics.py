"""Running in production: tracing (OpenTelemetry) and metrics (Prometheus) for workers and clients.

Tracing uses what Temporal ships, `temporalio.contrib.opentelemetry`:

    from temporalio.client import Client
    from towline import TowlinePlugin
    from towline.telemetry.metrics import configure_tracing, tracing_plugin

    configure_tracing("http://localhost:4318")          # OTLP/HTTP collector (towline[otel])
    client = await Client.connect("localhost:7233",
                                  plugins=[tracing_plugin(), TowlinePlugin([agent])])

`configure_tracing` installs the replay-safe tracer provider `contrib.opentelemetry`
requires (`create_tracer_provider`), so workflow, activity and client spans and
towline's own (`invoke_agent`, `turn`, `hook`, `chat`, `execute_tool`) form one
trace per run. Metrics: `prometheus_runtime(port)` is a Temporal `Runtime` whose
Prometheus endpoint serves the SDK's metrics and towline's (`METRICS`); connect
the worker's client with `runtime=` (or make it the default runtime).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from towline.activities.telemetry import METRICS as _ACTIVITY_METRICS
from towline.errors import ConfigurationError
from towline.telemetry.core_logs import core_logging
from towline.telemetry.tracing import METRICS as _WORKFLOW_METRICS

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, ReplaySafeTracerProvider

__all__ = [
    "METRICS",
    "ENDPOINT_ENV",
    "configure_tracing",
    "tracing_plugin",
    "traces_url",
    "prometheus_runtime",
]

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""The standard OpenTelemetry variable naming the OTLP collector (base URL)."""

METRICS: Mapping[str, str] = {**_WORKFLOW_METRICS, **_ACTIVITY_METRICS}
"""Every towline metric name, with its kind and labels (besides Temporal's own
`namespace`, `task_queue`, `workflow_type` / `activity_type`)."""

_EXTRA = "tracing needs the otel extra: pip install 'towline[otel]'"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for a collector base URL (`http://host:4318` -> `.../v1/traces`)."""
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigurationError(f"OTLP endpoint {endpoint!r} is not an http(s) URL")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def configure_tracing(
    endpoint: str | None = None,
    *,
    exporter: SpanExporter | None = None,
    service_name: str = "towline",
    batch: bool = True,
) -> ReplaySafeTracerProvider:
    """Export this process's spans; returns the (global) replay-safe tracer provider.

    `endpoint` is an OTLP/HTTP collector base URL (default: `$OTEL_EXPORTER_OTLP_ENDPOINT`);
    `exporter` replaces OTLP (an `InMemorySpanExporter` in tests, say). OpenTelemetry
    allows one global provider per process: a second call adds its exporter to the
    provider the first installed. `batch=False` exports each span as it ends, in the
    thread that ends it — a workflow's, inside Temporal's sandbox — so it is only for
    exporters that do no I/O (the in-memory one); OTLP is always batched.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from temporalio.contrib.opentelemetry import (
            ReplaySafeTracerProvider,
            create_tracer_provider,
        )
    except ImportError as e:
        raise ConfigurationError(f"{_EXTRA} ({e.name} is missing)") from None
    if exporter is None:
        url = endpoint or os.environ.get(ENDPOINT_ENV)
        if not url:
            raise ConfigurationError(f"no OTLP endpoint: pass one or set {ENDPOINT_ENV}")
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            raise ConfigurationError(f"{_EXTRA} ({e.name} is missing)") from None
        exporter = OTLPSpanExporter(endpoint=traces_url(url))
    provider = trace.get_tracer_provider()
    if not isinstance(provider, ReplaySafeTracerProvider):
        provider = create_tracer_provider(resource=Resource.create({"service.name": service_name}))
        trace.set_tracer_provider(provider)
        if trace.get_tracer_provider() is not provider:
            raise ConfigurationError(
                "another OpenTelemetry tracer provider is already installed in this process; "
                "temporalio.contrib.opentelemetry needs its replay-safe one "
                "(call configure_tracing first)"
            )
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    return provider


def tracing_plugin() -> OpenTelemetryPlugin:
    """`temporalio.contrib.opentelemetry.OpenTelemetryPlugin` with Temporal's own spans on.

    Put it on the client (before `TowlinePlugin`); workers built from the client get it.
    """
    try:
        from temporalio.contrib.opentelemetry import OpenTelemetryPlugin
    except ImportError as e:
        raise ConfigurationError(f"{_EXTRA} ({e.name} is missing)") from None
    return OpenTelemetryPlugin(add_temporal_spans=True)


def prometheus_runtime(port: int, host: str = "127.0.0.1") -> Runtime:
    """A Temporal runtime serving Prometheus metrics on `http://host:port/metrics`.

    It carries the SDK's worker and client metrics and towline's (`METRICS`), which
    towline records through Temporal's metric meters.
    """
    if not 0 < port < 65536:
        raise ConfigurationError(f"metrics port {port} is not a port number")
    return Runtime(telemetry=TelemetryConfig(
        logging=core_logging(), metrics=PrometheusConfig(bind_address=f"{host}:{port}")))
