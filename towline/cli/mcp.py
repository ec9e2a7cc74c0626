"""`towline mcp-serve --agent M:A ...`: agents as tools of any MCP client (an IDE, another agent).

Each agent is the MCP tool `run_<agent>(prompt)`. A call starts a durable `AgentRun`
(a workflow like any other, visible in the Temporal UI) and returns its final output;
while it runs, progress notifications follow its steps (the first one names the
workflow id); cancelling the MCP request sends the run the `cancel` signal. The
server speaks stdio (what an MCP client launches) or, with `--http`, streamable HTTP.
An in-process worker runs the agents unless `--no-worker`.

Over HTTP it answers only requests addressed to it by name (localhost, `--host`,
`--allow-host`: `towline.serve.http_guard`, the codec server's check too), and with `--auth`
only those carrying `Authorization: Bearer <token>`. Ctrl-C or SIGTERM stops it
gracefully: open requests get a moment to finish, then it exits 0.

The `mcp` SDK is imported only when the command runs (`pip install 'towline[mcp]'`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client

from towline.agent import Agent
from towline.cli.args import Subcommands, add_agents, command
from towline.cli.common import EXIT_USAGE, CliError, connected, load_agents, ui_base, workflow_url
from towline.cli.listener import (
    add_listener,
    announce,
    bearer_token,
    listening_socket,
    serve_beside_worker,
)
from towline.cli.progress import Progress
from towline.client import RunHandle, start_run
from towline.errors import RunError
from towline.serve.http_guard import GuardedApp, HostCheck

__all__ = ["AUTH_ENV", "mcp_serve_command", "tool_name", "register"]

AUTH_ENV = "TOWLINE_MCP_AUTH"
"""Default for `--auth`: the bearer token HTTP requests must carry."""

DEFAULT_PORT = 8000
"""The HTTP port of `--http` unless `--port` names one (a free port if it is taken)."""
_HTTP_GRACE = 5
"""Seconds open HTTP requests get to finish once the server is told to stop."""


def tool_name(agent: Agent) -> str:
    """`run_<agent>`, in the characters every MCP client accepts."""
    return "run_" + re.sub(r"[^A-Za-z0-9_-]", "_", agent.name)


class _Lines(Progress):
    """`towline run`'s step-by-step lines, collected instead of printed."""

    def __init__(self, workflow_id: str, agent: Agent) -> None:
        super().__init__(workflow_id, agent=agent)
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.extend(text.splitlines())


class AgentTools:
    """The `run_<agent>` tools of one MCP server, over one Temporal client."""

    def __init__(self, client: Client, agents: Sequence[Agent], task_queue: str, ui: str | None,
                 namespace: str) -> None:
        self.client = client
        self.agents = list(agents)
        self.task_queue = task_queue
        self.ui = ui
        self.namespace = namespace

    def server(self) -> Any:
        """An `MCPServer` with one tool per agent."""
        from mcp.server.mcpserver import Context, MCPServer
        from mcp_types import CallToolResult

        server = MCPServer("towline", log_level="WARNING", instructions=(
            "Each tool runs a towline agent on a prompt as a durable Temporal workflow and "
            "returns its final answer. Progress notifications follow the run's steps."))
        for agent in self.agents:
            run_agent = self._tool(agent)
            run_agent.__annotations__ = {"prompt": str, "ctx": Context, "return": CallToolResult}
            text = agent.static_instructions  # a function's text is the run's to ask for
            about = f" Its instructions: {text}" if text else ""
            server.add_tool(
                run_agent, name=tool_name(agent),
                description=(f"Run the agent {agent.name!r} on a prompt (a durable run: a Temporal "
                             f"workflow) and return its final answer.{about}"),
            )
        return server

    def _tool(self, agent: Agent) -> Any:
        async def run_agent(prompt: str, ctx: Any) -> Any:
            return await self.run(agent, prompt, ctx)

        return run_agent

    async def run(self, agent: Agent, prompt: str, ctx: Any) -> Any:
        """One tool call: start the run, report its steps, return its output."""
        import anyio
        from mcp_types import CallToolResult, TextContent

        handle = await start_run(self.client, agent, prompt, task_queue=self.task_queue)
        meta = {"towline/workflow_id": handle.id}
        url = workflow_url(self.ui, self.namespace, handle.id)
        reported = 0

        async def report(lines: list[str]) -> None:
            nonlocal reported
            for line in lines[reported:]:
                reported += 1
                await ctx.report_progress(reported, None, line)

        started = f"run {handle.id} started (agent {agent.name})" + (f"; UI: {url}" if url else "")
        await report([started])
        lines = _Lines(handle.id, agent)
        run = RunHandle(handle)
        try:
            async for event in run.events(client=self.client):
                lines(event)
                await report([started, *lines.lines])
            result = await run.result()
        except RunError as e:
            text = f"The run {handle.id} failed ({e.reason}): {e.message}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True,
                                  _meta=meta)
        except BaseException:  # the MCP request was cancelled (or the client went away)
            with anyio.CancelScope(shield=True):
                await run.cancel()
            raise
        output = result.output
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        c = result.counters
        structured = {"output": output, "workflow_id": handle.id, "steps": c.run_step,
                      "tool_calls": c.tool_calls, "total_tokens": c.total_tokens}
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=structured, _meta=meta)


def _http_server(server: Any, host: str, port: int, hosts: HostCheck, token: str | None) -> Any:
    """A `uvicorn.Server` for the MCP server's streamable-HTTP app, behind `GuardedApp`.

    Run here rather than by `run_streamable_http_async` so that it can be told to stop
    (`should_exit`): cancelling the SDK's server mid-lifespan prints a traceback.
    """
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    app = server.streamable_http_app(  # the Host check is GuardedApp's, with our names
        host=host, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    config = uvicorn.Config(GuardedApp(app, hosts, token), host=host, port=port,
                            log_level="warning", timeout_graceful_shutdown=_HTTP_GRACE)
    return uvicorn.Server(config)


def _auth_token(args: Any) -> str | None:
    """The bearer token of `--auth`, else of `AUTH_ENV` when serving HTTP (a stdio server
    ignores the variable: it is its client's own process)."""
    if args.auth is not None and not args.http:
        raise CliError("--auth is for --http (a stdio server is its client's own process)",
                       EXIT_USAGE)
    return bearer_token(args.auth if args.auth is not None else (
        os.environ.get(AUTH_ENV) if args.http else None))


async def mcp_serve_command(args: Any) -> int:
    """`towline mcp-serve`."""
    agents = load_agents(args.agent)
    names = [tool_name(a) for a in agents]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CliError(f"two agents would both be the MCP tool {twice[0]!r}; rename one", EXIT_USAGE)
    token = _auth_token(args)
    hosts = HostCheck.serving(args.host, args.allow_host or ())
    try:
        import mcp  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError:
        raise CliError("towline mcp-serve needs the MCP extra: pip install 'towline[mcp]'") from None
    client, target = await connected(args, agents)
    tools = AgentTools(client, agents, args.task_queue, ui_base(target, args.ui_url), target.namespace)
    server = tools.server()
    notes: list[str] = []
    listening = (listening_socket(args.host, args.port, DEFAULT_PORT, "MCP server", notes)
                 if args.http else None)
    port: int | None = listening.getsockname()[1] if listening is not None else None
    where = f"http://{args.host}:{port}/mcp" if args.http else "stdio"
    announce("towline mcp-serve:", f"{', '.join(names)} over {where}", target, args, token=token,
             port=port, notes=notes)
    web = _http_server(server, args.host, port, hosts, token) if port is not None else None

    def stop_serving(serving: asyncio.Future[Any]) -> None:
        if web is not None:
            web.should_exit = True  # uvicorn's own graceful shutdown, lifespan included
        elif not serving.done():
            serving.cancel()

    await serve_beside_worker(client, args, web.serve(sockets=[listening]) if web is not None
                              else server.run_stdio_async(), stop_serving)
    return 0


def register(sub: Subcommands) -> None:
    """`towline mcp-serve`."""
    p = command(
        sub, "mcp-serve", mcp_serve_command,
        help="serve agents as MCP tools (run_<agent>) to any MCP client",
        description="An MCP server whose tools run agents: a call of run_<agent>(prompt) starts a "
        "durable AgentRun and returns its output, with progress notifications per step; "
        "cancelling the call cancels the run. stdio by default (for MCP clients that launch "
        "it), streamable HTTP with --http. Needs towline[mcp].")
    add_agents(p)
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    add_listener(p, default_port=DEFAULT_PORT, auth_env=AUTH_ENV, http_only=True,
                 ui_what=", for the run's address in progress messages")
