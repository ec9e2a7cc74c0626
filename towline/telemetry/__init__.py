"""Telemetry: OpenTelemetry tracing, Prometheus metrics, and what a run costs in Temporal Actions."""
