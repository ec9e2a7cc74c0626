"""MCP tools in a run (workflow side): listing them into the run's inventory, calling them.

Before a turn, `refresh_mcp_tools` lists the agent's MCP servers — once per run, or
before every turn (`Agent.mcp_list_tools`) — each through the activity
`towline.mcp.<server>.list_tools`, whose result the history records, so replay
never talks to a server. The listed tools replace the server's previous ones in
`Run.tools`, where admission, selection and authority treat them like any tool.
A call of one is the activity `towline.tool.<name>` with an `MCPCallInput`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import Priority
from temporalio.exceptions import ActivityError, ApplicationError

from towline.activities.io import ToolActivityInput
from towline.errors import ConfigurationError, MCPServerUnavailable
from towline.mcp import (
    NOT_STARTED,
    MCPCallInput,
    MCPListInput,
    MCPListResult,
    MCPServer,
    MCPTool,
    list_activity_name,
)
from towline.tools import Tool, ToolContext

from .run import Run

__all__ = ["refresh_mcp_tools", "restore_mcp_tools", "tool_activity_input", "not_started"]


async def refresh_mcp_tools(run: Run) -> None:
    """List the servers that are due (all before every turn, else those not listed yet)."""
    servers = run.agent.mcp_servers
    every_turn = run.agent.mcp_list_tools == "per_turn"
    due = [s for s in servers if every_turn or s.name not in run.inventory.mcp_listings]
    if not due:
        return
    outcomes = await asyncio.gather(*(_list(s, run.dispatch.priority) for s in due))
    for server, outcome in zip(due, outcomes, strict=True):
        if isinstance(outcome, MCPListResult):
            run.inventory.mcp_listings[server.name] = list(outcome.tools)
        elif server.required:
            raise MCPServerUnavailable(f"the tools of MCP server {server.name!r} could not be "
                                       f"listed: {outcome}")
        else:  # optional: the run goes on with the last list it got (or none)
            workflow.logger.warning("MCP server %r not listed: %s", server.name, outcome)
            run.inventory.mcp_listings.setdefault(server.name, [])
    restore_mcp_tools(run)


async def _list(server: MCPServer, priority: Priority) -> MCPListResult | str:
    try:
        return await workflow.execute_activity(
            list_activity_name(server.name), MCPListInput(server=server.name),
            result_type=MCPListResult, start_to_close_timeout=server.list_timeout,
            retry_policy=server.effective_retry_policy(), summary=f"{server.name} · list tools",
            priority=priority,  # fleet: the run's
        )
    except ActivityError as e:
        cause = e.cause or e
        return f"{type(cause).__name__}: {cause}"


def restore_mcp_tools(run: Run) -> None:
    """Put the tools of `run.inventory.mcp_listings` into `run.inventory.tools` (replacing earlier MCP tools).

    Servers in the agent's order, tools in each server's order. A listed tool whose
    name is taken (by the agent's own tools or another server's), or whose schema is
    invalid, is left out, with a warning: a server never breaks a run by what it lists.
    """
    for name, known in list(run.inventory.tools.items()):
        if isinstance(known, MCPTool):
            del run.inventory.tools[name]
    for server in run.agent.mcp_servers:
        for spec in run.inventory.mcp_listings.get(server.name, []):
            if server.tools is not None and spec.name not in server.tools:
                continue
            try:
                tool = MCPTool.listed(server, spec)
            except (ConfigurationError, ValueError) as e:
                workflow.logger.warning("MCP tool %r of %r left out: %s", spec.name, server.name, e)
                continue
            if tool.name in run.inventory.tools:
                workflow.logger.warning("MCP tool %r of %r left out: the name %r is taken",
                                        spec.name, server.name, tool.name)
                continue
            run.inventory.tools[tool.name] = tool


def tool_activity_input(tool: Tool, args: dict[str, Any], ctx: ToolContext, *,
                        entry_mark: bool = True) -> Any:
    """The input of a tool's activity: which server tool to call for an MCP tool."""
    if isinstance(tool, MCPTool):
        return MCPCallInput(server=tool.server, tool=tool.remote_name, args=args, ctx=ctx,
                            idempotent=tool.idempotent)
    return ToolActivityInput.of(args, ctx).model_copy(update={"entry_mark": entry_mark,
                                                              "idempotent": tool.idempotent})


def not_started(error: BaseException) -> bool:
    """Whether a tool activity's failure says the tool's effect certainly never started."""
    return isinstance(error, ApplicationError) and error.type == NOT_STARTED
