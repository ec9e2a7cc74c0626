"""`Inventory`: the tools a run may call, and where each came from.

A part of `Run` (`Run.inventory`): the agent's tools (and those its capabilities contribute,
`Agent.inventory`), the client's (`workflows.client_tools`), the MCP servers' as last listed
(`workflows.mcp_tools`), and the subset the run was started with (`RunInput.allowed_tools`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from towline.mcp import MCPToolSpec
from towline.tools import Tool

__all__ = ["Inventory"]


@dataclass
class Inventory:
    """The run's tools: what the model is offered and what a call may run."""

    tools: dict[str, Tool] = field(default_factory=dict[str, Tool])
    """The agent's tools (and those its capabilities contribute), plus tools the run discovers
    as it goes (`Run` fills it from the agent). A copy: nothing a run adds reaches the shared
    agent."""
    allowed_tools: frozenset[str] | None = None
    """The tools the run may execute (`RunInput.allowed_tools`; None: all of `tools`)."""
    client_tools: dict[str, Tool] = field(default_factory=dict[str, Tool])
    """The input's client tools (`workflows.client_tools`): the run's, so they stay
    in `tools` across handoffs."""
    client_wait: timedelta | None = None
    """A session's `session_timeout`, the longest a client tool's
    call waits for its result (None: the tool's own timeout alone)."""
    mcp_listings: dict[str, list[MCPToolSpec]] = field(default_factory=dict[str, list[MCPToolSpec]])
    """The last tool list of each MCP server, as recorded (see `mcp_tools`)."""
