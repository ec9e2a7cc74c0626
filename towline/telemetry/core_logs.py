"""Where the Temporal SDK's Rust core writes its log lines: through Python's `logging`.

Left to itself the core prints its warnings (a failing workflow task, a query it could not
answer) straight to the process's standard output, in colour, between a command's results:
`towline run --json` then prints something that is not JSON. Forwarded, they are records of
the `temporalio.core` logger, which the CLI's handlers print as one line on standard error
(and the log file keeps), like every other warning.

One warning is dropped: the core's `TMPRL1103`, a payload over its 512 KiB warning size.
towline measures the payloads it sends itself and refuses one over the server's limit with
the fix named (a payload store); the core's line would say the same thing less usefully,
and for every payload between the two sizes.
"""

from __future__ import annotations

import functools
import logging

from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig

__all__ = ["CORE_LOGGER", "core_logging", "forwarding_runtime"]

CORE_LOGGER = "temporalio.core"
"""The Python logger the core's records are forwarded to (its target begins the message)."""

_DROPPED = ("[TMPRL1103]",)
"""The core's warnings towline says better itself (the module's docstring)."""


class _Drop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(code in message for code in _DROPPED)


_DROP = _Drop()


def core_logging() -> LoggingConfig:
    """The SDK's default level filter (core warnings, others' errors), forwarded to
    `CORE_LOGGER` instead of printed to standard output."""
    core = logging.getLogger(CORE_LOGGER)
    core.addFilter(_DROP)  # once: the same filter is not added twice
    return LoggingConfig(filter=LoggingConfig.default.filter,
                         forwarding=LogForwardingConfig(logger=core, append_target_to_name=False))


@functools.cache
def forwarding_runtime() -> Runtime:
    """A runtime with the SDK's defaults but for `core_logging`: the CLI's default runtime.

    One per process: `run_cli` asks for it on every call (a program may call it often), and a
    runtime starts the core's threads."""
    return Runtime(telemetry=TelemetryConfig(logging=core_logging()))
