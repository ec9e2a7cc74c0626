"""`MCPToolSpec`: one tool as an MCP server listed it, the record a run's history keeps.

Its own module because both the MCP tool source (`towline.mcp`, which builds tools from it)
and the run state (`towline.results`, which carries a run's listings across
continue-as-new) hold it; `towline.mcp` imports the errors module, whose `RunError` names
the run state, so keeping the record here leaves no import cycle. Import it from
`towline.mcp`: that is the public path.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MCPToolSpec"]


class MCPToolSpec(BaseModel):
    """One tool as a server listed it (what the history records)."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The tool's name on the server."""
    description: str = ""
    """Shown to the model."""
    input_schema: dict[str, Any] = Field(default_factory=dict[str, Any])
    """JSON schema of the arguments object."""
    read_only: bool = False
    """The server's `readOnlyHint`."""
    idempotent_hint: bool = False
    """The server's `idempotentHint`."""
    destructive: bool = False
    """The server's `destructiveHint`."""
