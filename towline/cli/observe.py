"""The worker options `towline dev`, `towline worker` and `towline run` share: tracing,
metrics, encryption and the payload store, set up before any client is created."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Plugin
from temporalio.runtime import Runtime

from towline.cli.common import (
    EXIT_USAGE,
    CliError,
    encryption,
    payload_store_of,
    port_free,
    port_in_use,
)
from towline.encryption.codec import EncryptionCodec
from towline.errors import ConfigurationError
from towline.storage.payload_store import STORE_ENV, PayloadStore

__all__ = ["Observability", "add_tracing_option", "observability", "store_line", "tracing"]


@dataclass
class Observability:
    """What the worker options set up: tracing, metrics, encryption."""

    encryption: EncryptionCodec | None = None
    """The codec of ``--encrypt``."""
    plugins: list[Plugin] = field(default_factory=list[Plugin])
    """Client plugins to add (the tracing plugin)."""
    tracer: Any = None
    """The tracer provider, flushed on exit."""
    lines: list[str] = field(default_factory=list[str])
    """What to tell the user."""
    payload_store: PayloadStore | None = None
    """The store of ``--payload-store`` (or ``TOWLINE_PAYLOAD_STORE``)."""

    def flush(self) -> None:
        """Export the spans still buffered (the CLI leaves with `os._exit`)."""
        if self.tracer is not None:
            self.tracer.force_flush(10_000)


def observability(args: Any, default_store: str | None = None) -> Observability:
    """Set up the worker options; call before any client is created (metrics need that).

    The payload store is ``--payload-store``, else ``TOWLINE_PAYLOAD_STORE``, else
    `default_store` (`towline dev`'s `<state dir>/payloads`).
    """
    store_url = args.payload_store or os.environ.get(STORE_ENV) or default_store
    obs = Observability(encryption=encryption(args.encrypt), payload_store=payload_store_of(store_url))
    if args.metrics_port is not None:
        if not port_free(args.metrics_port, args.metrics_host):
            raise port_in_use("metrics", args.metrics_port)
        from towline.telemetry.metrics import prometheus_runtime

        Runtime.set_default(prometheus_runtime(args.metrics_port, args.metrics_host),
                            error_if_already_set=False)
        obs.lines.append(f"http://{args.metrics_host}:{args.metrics_port}/metrics  (Prometheus)")
    tracing(args.otel_endpoint, obs)
    if obs.encryption is not None:
        obs.lines.append(f"payloads encrypted with key id {obs.encryption.key_id}")
    store = obs.payload_store
    if store is not None and store.scheme == "file":
        store.directory.mkdir(parents=True, exist_ok=True)  # clients find it (`Target`)
    return obs


def store_line(store: PayloadStore) -> str:
    """How a command tells where large payloads go."""
    return (f"{store.url}  (payloads of {store.threshold // 1024} KiB and more; the history "
            "holds a reference)")


def tracing(endpoint: str | None, obs: Observability) -> Observability:
    """Export traces to `endpoint` (or OTEL_EXPORTER_OTLP_ENDPOINT), if either is set."""
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if endpoint:
        try:
            from towline.telemetry.metrics import configure_tracing, tracing_plugin

            obs.tracer = configure_tracing(endpoint)
            obs.plugins.append(tracing_plugin())
        except ConfigurationError as e:
            raise CliError(str(e), EXIT_USAGE) from None
        obs.lines.append(f"{endpoint}  (OTLP/HTTP traces)")
    return obs


def add_tracing_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:  # pyright: ignore[reportPrivateUsage]
    """`--otel-endpoint URL`."""
    parser.add_argument("--otel-endpoint", metavar="URL",
                        help="export traces to this OTLP/HTTP collector, e.g. http://localhost:4318 "
                        "(default: OTEL_EXPORTER_OTLP_ENDPOINT; needs towline[otel])")
