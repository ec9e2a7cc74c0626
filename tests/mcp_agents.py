"""Agents with MCP servers for the worker-crash tests, importable by a worker process.

`tests/worker_main.py --agents mcp_agents:AGENTS` serves them. Their stdio server
(`tests/mcp_servers.py`) counts effects under `<TOWLINE_TEST_EFFECTS>/server`, so the
test reads back what the servers of both workers (the killed one and its successor)
did. A short heartbeat timeout lets the successor take over a killed call quickly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from mcp_helpers import stdio_launch
from temporalio.common import RetryPolicy

from towline import Agent, ModelResponse, ToolCallPart
from towline.mcp import MCPServer
from towline.messages import Message, ModelRequest, ToolReturnPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["AGENTS", "idempotent_agent", "uncertain_agent", "server_root"]

def server_root() -> Path:
    """Where this process's MCP servers count effects (set by the test for each worker)."""
    return Path(os.environ.get("TOWLINE_TEST_EFFECTS", "/nonexistent")) / "server"


def _server(name: str, idempotent: bool) -> MCPServer:
    return MCPServer(
        name=name,  # the directory is read on the worker, when it connects
        **stdio_launch("stdio", "--dir", "${TOWLINE_TEST_EFFECTS}/server"),
        idempotent=idempotent, heartbeat_timeout=timedelta(seconds=4),
        retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=300), maximum_attempts=10),
    )


def _slow_then_answer(tool: str) -> Callable[[list[Message], ModelInfo], ModelResponse | str]:
    def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        done = [p for m in messages if isinstance(m, ModelRequest)
                for p in m.parts if isinstance(p, ToolReturnPart)]
        if not done:
            return ModelResponse(parts=[ToolCallPart(tool_name=tool, args={"label": "first", "seconds": 20})])
        return f"{done[0].status}: {done[0].content}"

    return script


idempotent_agent = Agent(
    name="mcp-crash-idempotent",
    model=FunctionModel(_slow_then_answer("idem_slow_record"), model_name="mcp-crash-idempotent"),
    mcp_servers=[_server("idem", idempotent=True)],
)
"""Its slow MCP tool is idempotent: a call cut off by a crash is made again."""

uncertain_agent = Agent(
    name="mcp-crash-uncertain",
    model=FunctionModel(_slow_then_answer("once_slow_record"), model_name="mcp-crash-uncertain"),
    mcp_servers=[_server("once", idempotent=False)],
)
"""Its slow MCP tool is not idempotent: a call cut off by a crash is `unknown`."""

AGENTS = [idempotent_agent, uncertain_agent]
