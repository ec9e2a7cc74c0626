"""The log of a worker the CLI runs (`towline run`, `dev`, `worker`, `serve`, `mcp-serve`): one
line per failed activity attempt in the terminal, the full traceback in the log file.

Temporal retries a failed activity attempt (a model request answered HTTP 500, a tool that
raised), and its SDK logs each one with the exception's whole traceback. In the terminal that
is noise among the progress lines: there each failure is one `towline: activity ... attempt N
failed: ...` line; `--verbose` prints the tracebacks as well. The log file (`--log-file`,
default `LOG_FILE`) keeps every record with its traceback and time; it is created on the
first record.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from temporalio.exceptions import ApplicationError

from towline.cli.common import one_line

__all__ = ["LOG_FILE", "add_log_options", "worker_logging", "OneLine"]

LOG_FILE = ".towline/worker.log"
"""Where the worker's log goes unless `--log-file` says otherwise."""

_FAILED = "ActivityFailure"
"""How the Temporal SDK marks the record (with the traceback) it logs when an activity attempt
fails."""


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """`-v/--verbose` and `--log-file`."""
    group = parser.add_argument_group("worker log")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="print the full traceback of each failed activity attempt (by "
                       "default each is one line here, its traceback in the log file)")
    group.add_argument("--log-file", default=LOG_FILE, metavar="FILE",
                       help=f"the worker's log, tracebacks included (default: {LOG_FILE}, "
                       "created on the first record)")


def _failure(exc: BaseException | None) -> str:
    """An exception as one line: its type (an `ApplicationError`'s own) and message."""
    if exc is None:
        return "no exception"
    if isinstance(exc, ApplicationError):
        return f"{exc.type or type(exc).__name__}: {one_line(exc.message)}"
    return f"{type(exc).__name__}: {one_line(exc)}"


def _failed_attempt(record: logging.LogRecord) -> bool:
    """Whether `record` is the SDK's of a failed activity attempt."""
    return getattr(record, "__temporal_error_identifier", None) == _FAILED


class OneLine(logging.Formatter):
    """A record as one line: a failed activity attempt as what failed, on which attempt, why;
    any other record's traceback as its exception's one line (`where`: the log file)."""

    def __init__(self, where: str | None) -> None:
        super().__init__()
        self.where = where

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        info: dict[str, Any] = getattr(record, "temporal_activity", None) or {}
        if _failed_attempt(record) and info:
            text = (f"activity {info.get('activity_type')} attempt {info.get('attempt')} failed: "
                    f"{_failure(exc)} (workflow {info.get('workflow_id')}; Temporal retries it "
                    "unless that was its last attempt)")
        else:
            text = record.getMessage()
            if record.exc_info:
                text += f": {_failure(exc)}"
        if record.exc_info and self.where:
            text += f" [traceback in {self.where}]"
        return f"towline: {text}"


class _Stderr(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is when a record comes (as `logging.lastResort` does)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _LazyFile(logging.FileHandler):
    """A log file whose directory and file are made on the first record."""

    def _open(self) -> TextIO:  # pyright: ignore[reportIncompatibleMethodOverride]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


_INSTALLED: list[logging.Handler] = []
"""The handlers `worker_logging` added to the root logger."""


class _ToldElsewhere(logging.Filter):
    """Leaves out the failed-attempt records: the command's own lines tell of them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _failed_attempt(record)


def worker_logging(args: Any, *, attempts_told: bool = False) -> None:
    """Log as `add_log_options` says: warnings on stderr, one line each unless
    `--verbose`; everything from INFO on, with tracebacks, in the log file.

    `attempts_told`: the command prints each failed attempt itself (`towline run` following
    its run: `[step 1] model request attempt 1 failed: ...; retrying in 2 s`), so the worker's
    own line would say it twice; the log file still has the record and its traceback."""
    root = logging.getLogger()
    for handler in _INSTALLED:  # a second call (tests run commands in one process) replaces
        root.removeHandler(handler)
    _INSTALLED.clear()
    terminal = _Stderr()
    terminal.setLevel(logging.WARNING)
    log_file: str | None = getattr(args, "log_file", None)
    if getattr(args, "verbose", False):
        terminal.setFormatter(logging.Formatter("towline: %(message)s"))
    else:
        terminal.setFormatter(OneLine(log_file))
        if attempts_told:
            terminal.addFilter(_ToldElsewhere())
    handlers: list[logging.Handler] = [terminal]
    if log_file:
        file = _LazyFile(log_file, delay=True, encoding="utf-8")
        file.setLevel(logging.INFO)
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(file)
    for handler in handlers:
        root.addHandler(handler)
    _INSTALLED.extend(handlers)
    root.setLevel(logging.INFO)
