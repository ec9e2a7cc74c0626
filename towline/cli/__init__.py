"""The `towline` command: one module per command family, each registering its subcommands.

    towline run examples.calculator:agent "What is 6 times 7?"
    towline dev --agent examples.calculator:agent
    towline worker --agent myapp.agents:support
    towline show calculator-1a2b3c4d5e6f
    towline watch research-1a2b3c4d5e6f
    towline approve calculator-1a2b3c4d5e6f test_1_0 --reason "looks fine"
    towline runs --status waiting
    towline pending
    towline send chat-1 "And now?"
    towline cancel chat-1
    towline mcp-serve --agent examples.calculator:agent
    towline replay --agent myapp.agents:support

Connection settings (address, namespace, TLS, API key) come from Temporal's
environment configuration (`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, profiles in
`temporal.toml`); `--address` and `--namespace` override them. Errors are one
`towline: error: ...` line: exit code 2 for bad arguments, 1 for failures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from towline.cli.args import Handler, finish
from towline.cli.common import EXIT_FAILURE, CliError, one_line

__all__ = ["main", "run_cli", "build_parser"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("towline")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (each has `--help`).

    Each command family lives in its own module, which adds its subcommands with
    `register(sub)`.
    """
    from towline.cli import (
        codec,
        evaluate,
        fleet,
        mcp,
        replay,
        review,
        run,
        runs,
        serve,
        server,
        show,
        steer,
        timetravel,
        watch,
    )

    parser = argparse.ArgumentParser(
        prog="towline", description="Run AI agents as durable Temporal workflows.",
        epilog="Run `towline COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"towline {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (server, run, show, watch, runs, steer, review, replay, codec, mcp, timetravel, evaluate,
                   fleet, serve):
        module.register(sub)
    return finish(parser)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the command, and return its exit code (errors are one line).

    Unless the process already has a default Temporal runtime, the command's is one whose
    core logs go through Python's `logging` (`towline.telemetry.core_logs`): left to the
    SDK's default, the core prints its warnings on standard output, between a command's
    results (seen in `python examples/vision.py`, whose JSON a core warning preceded).
    """
    _forward_core_logs()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    handler: Handler = args.handler
    try:
        return asyncio.run(handler(args))
    except CliError as e:
        print(f"towline: {e.label}: {e.message}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("towline: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("TOWLINE_DEBUG"):
            raise
        print(f"towline: error: {type(e).__name__}: {one_line(e)} "
              "(set TOWLINE_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_FAILURE


def _forward_core_logs() -> None:
    """Make the core's warnings log records (on stderr), never lines in a command's output."""
    from temporalio.runtime import Runtime

    from towline.telemetry.core_logs import forwarding_runtime

    try:
        Runtime.set_default(forwarding_runtime(), error_if_already_set=True)
    except RuntimeError:
        pass  # the program chose its own runtime: it keeps it


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the `towline` script.

    The SDK's core logs through Python's `logging` (`run_cli`). Leaves
    with `os._exit` after flushing: the Temporal SDK's Rust runtime can abort
    the interpreter during normal finalisation (temporalio/sdk-python#300), which would
    turn a successful command into a crash exit code.
    """
    if argv is None:  # the script itself: commands that run workflow code pin the hash seed
        from towline.runtime.hashseed import pin_hash_seed

        pin_hash_seed(sys.argv[1:])
    code = run_cli(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

