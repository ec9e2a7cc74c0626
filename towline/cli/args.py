"""The arguments of the `towline` commands: argparse types, the options several commands share,
and the one shape every command is registered in (`command`).

Each command family's module has a `register(sub: Subcommands)` that adds its commands with
`command(sub, NAME, HANDLER, help=..., description=...)`: the parser, its handler and (unless
`connection=False`) the connection options, which `finish` adds last, after the command's own,
so that `--help` lists what the command does first. No module restates that shape.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeAlias

from towline.encryption.codec import KEY_ENV
from towline.options import INT32_MAX

__all__ = [
    "Subcommands",
    "Handler",
    "command",
    "finish",
    "positive",
    "non_negative",
    "model_string",
    "port_number",
    "add_connection",
    "add_encrypt",
    "add_server",
    "add_task_queue",
    "add_allow_model",
    "add_agents",
    "add_no_worker",
    "add_ui_url",
    "add_json",
    "add_allow_host",
]

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # pyright: ignore[reportPrivateUsage]
"""What `ArgumentParser.add_subparsers` returns: where a module's `register` adds its commands."""
Handler = Callable[[Any], Coroutine[Any, Any, int]]
"""A command's body: the parsed arguments in, the exit code out."""


def command(
    sub: Subcommands, name: str, handler: Handler, *, help: str,
    description: str | None = None, connection: bool = True, **defaults: Any,
) -> argparse.ArgumentParser:
    """Add the command `name`, run by `handler` (with `defaults` set on its arguments); with
    `connection`, `finish` gives it `--address`, `--namespace` and `--encrypt` (`add_connection`)."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler, **defaults, **{_CONNECTION: connection})
    return parser


_CONNECTION = "wants_connection_options"
"""The default `command` sets on a parser to tell `finish` whether it takes the connection
options."""


def finish(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` with the connection options added, last, to every command below it that asked
    for them."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():  # pyright: ignore[reportPrivateUsage]
        choices: dict[str, argparse.ArgumentParser] = getattr(action, "choices", None) or {}
        for child in dict.fromkeys(choices.values()):  # an alias would repeat a parser
            finish(child)
    if parser.get_default(_CONNECTION):
        parser.set_defaults(**{_CONNECTION: False})  # added once, however often it is finished
        add_connection(parser)
    return parser


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive(text: str) -> int:
    """argparse type: a whole number >= 1."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    if value > INT32_MAX:  # the ledger's counters are 32-bit
        raise argparse.ArgumentTypeError(f"{text} is too large (at most {INT32_MAX})")
    return value


def non_negative(text: str) -> int:
    """argparse type: a whole number >= 0."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def json_object(text: str) -> dict[str, Any]:
    """argparse type: a JSON object (`towline run --context '{"user_id": 7}'`)."""
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(
            f"not JSON ({e.msg} at character {e.pos}): {text[:80]}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, not a JSON "
                                         f"{type(value).__name__}: {text[:80]}")
    return value  # pyright: ignore[reportUnknownVariableType]


def model_string(text: str) -> str:
    """argparse type: a model name (`openai:gpt-4.1-mini`, a registered name, `test`)."""
    if not text.strip() or text != text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not a model name")
    return text


def port_number(text: str) -> int:
    """argparse type: a TCP port."""
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port number")
    return value


def add_connection(parser: argparse.ArgumentParser) -> None:
    """`--address` and `--namespace` (defaults from Temporal's environment configuration)."""
    group = parser.add_argument_group("connection (defaults from TEMPORAL_* / temporal.toml)")
    group.add_argument("--address", metavar="HOST:PORT",
                       help="Temporal server address (default: TEMPORAL_ADDRESS or localhost:7233)")
    group.add_argument("--namespace", metavar="NS",
                       help="namespace (default: TEMPORAL_NAMESPACE or 'default')")
    add_encrypt(group)


def add_encrypt(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:  # pyright: ignore[reportPrivateUsage]
    """`--encrypt`: encrypt and decrypt payloads with the keys in TOWLINE_ENCRYPTION_KEY."""
    parser.add_argument("--encrypt", action="store_true",
                        help=f"encrypt payloads (and read encrypted runs) with the keys in {KEY_ENV}")


def add_server(parser: argparse.ArgumentParser, what: str, port_default: str) -> None:
    """The embedded server's `--state-dir`, `--port` and `--ui-port`."""
    group = parser.add_argument_group(f"embedded server ({what})")
    group.add_argument("--state-dir", default=".towline", metavar="DIR",
                       help="folder of the SQLite database (default: .towline)")
    group.add_argument("--port", type=port_number, metavar="PORT",
                       help=f"gRPC port (default: {port_default}, or a free port if taken)")
    group.add_argument("--ui-port", type=port_number, metavar="PORT",
                       help="Temporal UI port (default: 8233, or a free port if taken)")


def add_allow_model(parser: argparse.ArgumentParser) -> None:
    """`--allow-model PATTERN` (repeatable): models a run's input may switch agents to."""
    parser.add_argument("--allow-model", action="append", default=[], metavar="PATTERN",
                        help="let runs pick this model with `towline run --model` (fnmatch "
                        "pattern, e.g. 'openai:*' or 'anthropic:claude-*'; repeatable). An agent's "
                        "own model is always allowed")


def add_task_queue(parser: argparse.ArgumentParser, *, own: bool = False) -> None:
    """`--task-queue` (default: towline; with `own`, None: the command's worker takes a queue
    of its own, `towline.client.own_task_queue`)."""
    if own:
        parser.add_argument("--task-queue", metavar="QUEUE",
                            help="task queue of the run (default: a queue of this command's own, "
                            "towline-run-<random>, which no other worker polls, when it runs its "
                            "worker; towline with --no-worker)")
        return
    parser.add_argument("--task-queue", default="towline", metavar="QUEUE",
                        help="task queue of the runs and the worker (default: towline)")


def add_agents(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """`--agent MODULE:ATTR` (repeatable): the agents a worker or a server serves."""
    parser.add_argument("--agent", action="append", required=required, metavar="MODULE:ATTR",
                        help="an agent (or list of agents) to serve; repeatable")


def add_no_worker(parser: argparse.ArgumentParser, help: str = "do not run an in-process "
                  "worker (a worker must be running elsewhere)") -> None:
    """`--no-worker`: the command runs no worker of its own."""
    parser.add_argument("--no-worker", action="store_true", help=help)


def add_ui_url(parser: argparse.ArgumentParser, more: str = "") -> None:
    """`--ui-url URL`: the Temporal UI's base URL (`more`: the rest of its help, e.g. where the
    command shows links)."""
    parser.add_argument("--ui-url", metavar="URL", help="base URL of the Temporal UI" + more)


def add_json(parser: argparse.ArgumentParser, help: str) -> None:
    """`--json`: print data as JSON instead of lines."""
    parser.add_argument("--json", action="store_true", help=help)


def add_allow_host(parser: argparse.ArgumentParser, prefix: str = "", suffix: str = "") -> None:
    """`--allow-host NAME` (repeatable): Host names an HTTP server of the CLI answers."""
    parser.add_argument("--allow-host", action="append", metavar="NAME",
                        help=f"{prefix}a Host name it answers besides localhost and --host (its "
                        f"name on the network, a proxy's); repeatable; '*' answers any{suffix}. "
                        "Other names are refused, so a web page cannot reach it by DNS rebinding")
