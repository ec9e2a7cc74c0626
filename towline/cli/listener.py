"""What `towline serve` and `towline mcp-serve` share: the options of an HTTP listener in front
of agents (`add_listener`), its bearer token (`bearer_token`), the lines it starts with
(`announce`), and serving beside an in-process worker until Ctrl-C (`serve_beside_worker`)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from towline.cli.args import (
    add_allow_host,
    add_no_worker,
    add_task_queue,
    add_ui_url,
    port_number,
)
from towline.cli.common import (
    EXIT_USAGE,
    GRACEFUL_SHUTDOWN,
    CliError,
    Target,
    moved_port,
    port_in_use,
    say,
    stop_event,
)
from towline.cli.worker_log import add_log_options, worker_logging
from towline.serve.http_guard import LOCAL_NAMES

__all__ = ["add_listener", "bearer_token", "announce", "serve_beside_worker", "listening_socket"]


def add_listener(parser: Any, *, default_port: int, auth_env: str, ui_what: str,
                 http_only: bool = False) -> None:
    """`--host`, `--port`, `--auth`, `--allow-host`, `--no-worker`, `--ui-url` and `--task-queue`,
    which follow the command's `--agent` (`http_only`: the command also serves without HTTP, so the HTTP options
    say they are for `--http`)."""
    when = "with --http: " if http_only else ""
    parser.add_argument("--host", default="127.0.0.1", help=("HTTP host" if http_only else
                        "host to listen on") + " (default: 127.0.0.1)")
    parser.add_argument("--port", type=port_number, metavar="PORT",
                        help=("HTTP port" if http_only else "port") + f" (default: {default_port}, "
                        "or a free port if taken)")
    parser.add_argument("--auth", metavar="TOKEN",
                        help=f"{when}require 'Authorization: Bearer TOKEN' on every request"
                        + ("" if http_only else " but the page's") + f" (default: {auth_env}, else "
                        "none). Needed whenever anyone but you can reach the port: another user "
                        "of this machine, or other machines with --host")
    add_allow_host(parser, when)
    add_no_worker(parser)
    add_ui_url(parser, ui_what)
    add_task_queue(parser)
    add_log_options(parser)


def bearer_token(raw: str | None) -> str | None:
    """The bearer token `raw` names (None: no token); `CliError` if it is blank or has spaces."""
    if raw is None:
        return None
    token = raw.strip()
    if not token or any(c.isspace() for c in token):
        raise CliError("--auth takes a token without spaces (clients send 'Authorization: "
                       "Bearer TOKEN')", EXIT_USAGE)
    return token


def announce(title: str, where: str, target: Target, args: Any, *, token: str | None,
             port: int | None, notes: Sequence[str] = ()) -> None:
    """The notes, then one line: what serves `where`, against which server, with or without a
    worker and a token; a listener open beyond this machine without a token is called out."""
    lines = list(notes)
    if port is not None and token is None and args.host not in LOCAL_NAMES:
        lines.append(f"--host {args.host} without --auth: whoever reaches port {port} runs the "
                     "agents")
    for note in lines:
        say(f"note: {note}")
    say(f"{title} {where}; Temporal {target.address} (namespace {target.namespace!r}, task "
        f"queue {args.task_queue!r})" + ("" if args.no_worker else ", with a worker")
        + ("; bearer token required" if token else ""))


async def serve_beside_worker(client: Client, args: Any, serving: Coroutine[Any, Any, Any],
                              stop_serving: Callable[[asyncio.Future[Any]], None]) -> None:
    """Run `serving` (with a worker for `args.task_queue` unless `--no-worker`) until it ends or
    Ctrl-C / SIGTERM, which call `stop_serving` with it; then wait for it to finish, and say so."""
    worker_logging(args)
    stop = stop_event()  # Ctrl-C / SIGTERM: stop serving, let running activities finish
    async with AsyncExitStack() as stack:
        if not args.no_worker:
            await stack.enter_async_context(Worker(client, task_queue=args.task_queue,
                                                   graceful_shutdown_timeout=GRACEFUL_SHUTDOWN))
        served = asyncio.ensure_future(serving)
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({served, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        stop_serving(served)
        with contextlib.suppress(asyncio.CancelledError):
            await served
    say("stopped")


def listening_socket(host: str, requested: int | None, default: int, what: str,
                     notes: list[str]) -> socket.socket:
    """A socket bound to `host` and listening, on `requested` (taken: `CliError`), else on
    `default`, else, when that is taken, on a free port (with a note saying so).

    Bound here and handed to uvicorn (`Server.serve(sockets=[...])`) rather than checked
    free and bound by uvicorn later: between the two another process could take the port,
    and the URL announced would then reach that process (seen with two `towline serve`s
    started at once, one with `--auth`: the other answered without it).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    def bound(port: int) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind((host, port))
            sock.listen(2048)
        except BaseException:
            sock.close()
            raise
        return sock

    try:
        return bound(requested if requested is not None else default)
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise CliError(f"the {what} cannot listen on {host}: {e.strerror}") from None
        if requested is not None:
            raise port_in_use(what, requested) from None
    sock = bound(0)
    notes.append(moved_port(what, default, sock.getsockname()[1]))
    return sock
