"""`towline serve --agent M:A`: agents behind an AG-UI endpoint, and a web page to talk to them.

Serves `towline.serve.app` with uvicorn: `POST /agents/{name}` takes an AG-UI
`RunAgentInput` and answers with AG-UI events over server-sent events (a thread is a
durable session run), `GET /runs/{id}/events?from=N` resumes a dropped stream,
`POST /runs/{id}/approvals/{call_id}` decides a tool call waiting for approval, and `/`
is a page to chat with the agents. An in-process worker runs the agents unless
`--no-worker`.

Like `towline mcp-serve --http` it answers only requests addressed to it by name
(localhost, `--host`, `--allow-host`: `towline.serve.http_guard`), and with `--auth` (or
`TOWLINE_SERVE_AUTH`) only requests carrying `Authorization: Bearer <token>` — all but the
page itself, which a browser fetches without headers and which holds no data (it asks
for the token). Ctrl-C or SIGTERM stops it gracefully and it exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from contextlib import AsyncExitStack
from typing import Any

from temporalio.worker import Worker

from towline.cli.common import (
    EXIT_USAGE,
    CliError,
    add_connection,
    add_task_queue,
    connect_client,
    load_agents,
    port_number,
    resolve_target,
    ui_base,
)
from towline.cli.server import GRACEFUL_SHUTDOWN, choose_port, say, stop_event
from towline.serve.http_guard import LOCAL_NAMES, HostCheck

__all__ = ["AUTH_ENV", "DEFAULT_PORT", "serve_command", "register"]

AUTH_ENV = "TOWLINE_SERVE_AUTH"
"""Default for `--auth`: the bearer token API requests must carry."""
DEFAULT_PORT = 8000
"""The port unless `--port` names one (a free port if it is taken)."""
_GRACE = 2
"""Seconds open requests get to finish once the server is told to stop: an open event stream
(a page following a run that waits) never finishes by itself, and a page resumes it anyway."""


def _auth_token(given: str | None) -> str | None:
    """The bearer token of `--auth`, else of `AUTH_ENV` (None: no token)."""
    raw = given if given is not None else os.environ.get(AUTH_ENV)
    if raw is None:
        return None
    token = raw.strip()
    if not token or any(c.isspace() for c in token):
        raise CliError("--auth takes a token without spaces (clients send 'Authorization: "
                       "Bearer TOKEN')", EXIT_USAGE)
    return token


async def serve_command(args: Any) -> int:
    """`towline serve`."""
    token = _auth_token(args.auth)
    agents = load_agents(args.agent)
    hosts = HostCheck.serving(args.host, args.allow_host or ())
    try:
        import uvicorn

        from towline.serve.app import ServeConfig, create_app
    except ImportError as e:
        raise CliError(f"towline serve needs the serve extra ({e.name} is missing): "
                       "pip install 'towline[serve]'") from None
    target = resolve_target(args.address, args.namespace, encrypt=args.encrypt)
    client = await connect_client(target, agents)
    ui = ui_base(target, args.ui_url)
    app = create_app(ServeConfig(client=client, agents=agents, task_queue=args.task_queue, ui=ui,
                                 hosts=hosts, token=token))
    notes: list[str] = []
    port = choose_port(args.port, DEFAULT_PORT, "web server", notes)
    if token is None and args.host not in LOCAL_NAMES:
        notes.append(f"--host {args.host} without --auth: whoever reaches port {port} runs the "
                     "agents")
    for note in notes:
        say(f"note: {note}")
    shown = "localhost" if args.host in LOCAL_NAMES else args.host
    say(f"towline serve: {', '.join(a.name for a in agents)} at http://{shown}:{port}/ "
        f"(AG-UI: POST /agents/NAME); Temporal {target.address} (namespace "
        f"{target.namespace!r}, task queue {args.task_queue!r})"
        + ("" if args.no_worker else ", with a worker")
        + ("; bearer token required" if token else ""))
    config = uvicorn.Config(app, host=args.host, port=port, log_level="warning",
                            timeout_graceful_shutdown=_GRACE)
    web = uvicorn.Server(config)
    stop = stop_event()
    async with AsyncExitStack() as stack:
        if not args.no_worker:
            await stack.enter_async_context(Worker(client, task_queue=args.task_queue,
                                                   graceful_shutdown_timeout=GRACEFUL_SHUTDOWN))
        serving = asyncio.ensure_future(web.serve())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        app.close()  # open event streams end; uvicorn then stops at once
        web.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    say("stopped")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """`towline serve`."""
    p = sub.add_parser(
        "serve", help="serve agents over AG-UI (server-sent events) with a web page to chat",
        description="An AG-UI endpoint per agent (POST /agents/NAME: a RunAgentInput in, AG-UI "
        "events out over SSE; the threadId is a durable session run), resumable streams (GET "
        "/runs/ID/events?from=N), approvals (POST /runs/ID/approvals/CALL_ID) and a web page at "
        "/ to chat, watch tool calls, approve them and open the run in the Temporal UI. "
        "Needs towline[serve].")
    p.add_argument("--agent", action="append", required=True, metavar="MODULE:ATTR",
                   help="an agent (or list of agents) to serve; repeatable")
    p.add_argument("--host", default="127.0.0.1", help="host to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=port_number, metavar="PORT",
                   help=f"port (default: {DEFAULT_PORT}, or a free port if taken)")
    p.add_argument("--auth", metavar="TOKEN",
                   help="require 'Authorization: Bearer TOKEN' on every request but the page's "
                   f"(default: {AUTH_ENV}, else none). Needed whenever anyone but you can reach "
                   "the port: another user of this machine, or other machines with --host")
    p.add_argument("--allow-host", action="append", metavar="NAME",
                   help="a Host name it answers besides localhost and --host (its name on the "
                   "network, a proxy's); repeatable; '*' answers any. Other names are refused, so "
                   "a web page cannot reach it by DNS rebinding")
    p.add_argument("--no-worker", action="store_true",
                   help="do not run an in-process worker (a worker must be running elsewhere)")
    p.add_argument("--ui-url", metavar="URL",
                   help="base URL of the Temporal UI, for the page's links to a run")
    add_task_queue(p)
    add_connection(p)
    p.set_defaults(handler=serve_command)
