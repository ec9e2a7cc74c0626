"""`towline serve --agent M:A`: agents behind an AG-UI endpoint, and a web page to talk to them.

Serves `towline.serve.app` with uvicorn: `POST /agents/{name}` takes an AG-UI
`RunAgentInput` and answers with AG-UI events over server-sent events (a thread is a
durable session run; its `tools` are the run's client tools, and a call waiting for
approval ends the AG-UI run with the interrupt outcome, answered by the next input's
`resume`), `GET /runs/{id}/events?from=N` resumes a dropped stream,
`POST /runs/{id}/approvals/{call_id}` decides a tool call waiting for approval (approve,
reject, edit, respond), and `/` is a page to chat with the agents. An in-process worker runs
the agents unless `--no-worker`.

Like `towline mcp-serve --http` it answers only requests addressed to it by name
(localhost, `--host`, `--allow-host`: `towline.serve.http_guard`), and with `--auth` (or
`TOWLINE_SERVE_AUTH`) only requests carrying `Authorization: Bearer <token>` — all but the
page itself (and its `/favicon.ico`), which a browser fetches without headers and which holds no data (it asks
for the token). Ctrl-C or SIGTERM stops it gracefully and it exits 0. `--session-timeout` bounds how long a
thread's run waits for the page (its next message, a front-end tool's result).
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from towline.cli.args import Subcommands, add_agents, command, positive
from towline.cli.common import CliError, connected, load_agents, ui_base
from towline.cli.listener import (
    add_listener,
    announce,
    bearer_token,
    listening_socket,
    serve_beside_worker,
)
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
    return bearer_token(given if given is not None else os.environ.get(AUTH_ENV))


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
    client, target = await connected(args, agents)
    session_timeout = (timedelta(seconds=args.session_timeout)
                       if args.session_timeout is not None else None)
    app = create_app(ServeConfig(client=client, agents=agents, task_queue=args.task_queue,
                                 ui=ui_base(target, args.ui_url), hosts=hosts, token=token,
                                 session_timeout=session_timeout))
    notes: list[str] = []
    listening = listening_socket(args.host, args.port, DEFAULT_PORT, "web server", notes)
    port: int = listening.getsockname()[1]
    shown = "localhost" if args.host in LOCAL_NAMES else args.host
    announce("towline serve:", f"{', '.join(a.name for a in agents)} at http://{shown}:{port}/ "
             "(AG-UI: POST /agents/NAME)", target, args, token=token, port=port, notes=notes)
    web = uvicorn.Server(uvicorn.Config(app, host=args.host, port=port, log_level="warning",
                                        timeout_graceful_shutdown=_GRACE))

    def stop_serving(_: asyncio.Future[Any]) -> None:
        app.close()  # open event streams end; uvicorn then stops at once
        web.should_exit = True

    await serve_beside_worker(client, args, web.serve(sockets=[listening]), stop_serving)
    return 0


def register(sub: Subcommands) -> None:
    """`towline serve`."""
    p = command(
        sub, "serve", serve_command,
        help="serve agents over AG-UI (server-sent events) with a web page to chat",
        description="An AG-UI endpoint per agent (POST /agents/NAME: a RunAgentInput in, AG-UI "
        "events out over SSE; the threadId is a durable session run), resumable streams (GET "
        "/runs/ID/events?from=N), decisions (POST /runs/ID/approvals/CALL_ID: approve, reject, "
        "edit, respond; an AG-UI client gets the interrupt outcome and resumes), front-end "
        "tools (the input's tools) and a web page at / to chat, watch tool calls, decide them "
        "and open the run in the Temporal UI. "
        "Needs towline[serve].")
    add_agents(p)
    p.add_argument("--session-timeout", type=positive, metavar="SECONDS",
                   help="how long a thread's run waits for the page's next message, or for a "
                   "front-end tool's result, before it ends (default: 3600)")
    add_listener(p, default_port=DEFAULT_PORT, auth_env=AUTH_ENV,
                 ui_what=", for the page's links to a run")
