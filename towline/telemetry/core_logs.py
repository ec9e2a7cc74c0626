"""Where the Temporal SDK's Rust core writes its log lines: through Python's `logging`.

Left to itself the core prints its warnings (a failing workflow task, a query it could not
answer) straight to the process's standard output, in colour, between a command's results:
`towline run --json` then prints something that is not JSON. Forwarded, they are records of
the `temporalio.core` logger, which the CLI's handlers print as one line on standard error
(and the log file keeps), like every other warning.
"""

from __future__ import annotations

import logging

from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig

__all__ = ["CORE_LOGGER", "core_logging", "forwarding_runtime"]

CORE_LOGGER = "temporalio.core"
"""The Python logger the core's records are forwarded to (its target appended to the name)."""


def core_logging() -> LoggingConfig:
    """The SDK's default level filter (core warnings, others' errors), forwarded to
    `CORE_LOGGER` instead of printed to standard output."""
    return LoggingConfig(filter=LoggingConfig.default.filter,
                         forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)))


def forwarding_runtime() -> Runtime:
    """A runtime with the SDK's defaults but for `core_logging`: the CLI's default runtime."""
    return Runtime(telemetry=TelemetryConfig(logging=core_logging()))
