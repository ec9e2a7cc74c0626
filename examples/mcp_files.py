"""A notes agent whose tools come from an MCP server: `towline run examples.mcp_files:agent "..."`.

The worker starts `examples/files_server.py` (a filesystem-style MCP server) over stdio
and keeps the connection for every call; the run lists its tools once
(`files_list_files`, `files_read_file`, `files_write_file`) and calls them as Temporal
activities. The server marks its tools read-only or idempotent and the agent trusts
those hints, so a call cut off by a worker crash is made again by the next worker.

The notes folder is `NOTES_DIR` (default `./notes`, beside the worker); `NOTES_SLOW_SECONDS`
makes each write take that long (to kill a worker mid-call and watch the run survive). Like the
calculator, the model is a small deterministic stand-in (`notes_model`) reading the prompt:
"Save a note called todo.txt: buy milk", "Read todo.txt", "What notes do I have?".
"""

from __future__ import annotations

import json
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from towline import Agent, MCPServer
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "files", "notes_model"]

files = MCPServer(
    name="files",
    command=sys.executable,
    # ${...} is read from the worker's environment when it starts the server
    args=[str(Path(__file__).with_name("files_server.py")),
          "--root", "${NOTES_DIR:-notes}", "--slow", "${NOTES_SLOW_SECONDS:-0}"],
    trust_hints=True,  # our own server: its read-only / idempotent hints are true
    heartbeat_timeout=timedelta(seconds=5),  # a dead worker's call is taken over after 5 s
)
"""The notes folder as an MCP server the worker starts (over stdio)."""

_SAVE = re.compile(r"(?:save|write)\s+(?:a\s+)?(?:note\s+)?(?:called\s+)?([\w.\-/]+)\s*:\s*(.+)",
                   re.IGNORECASE | re.DOTALL)
_READ = re.compile(r"read\s+([\w.\-/]+)", re.IGNORECASE)


def _prompt(messages: list[Message]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, UserPart):
                    return p.text
    return ""


def _value(content: Any) -> Any:
    """A tool's result: the server's structured `{"result": ...}` unwrapped."""
    if isinstance(content, dict) and set(content) == {"result"}:  # pyright: ignore[reportUnknownArgumentType]
        return content["result"]
    return content


def notes_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Deterministic offline model: one tool call for the prompt, then a sentence about it."""
    prompt = _prompt(messages).strip().rstrip("?.!")
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        ret = next(p for p in last.parts if isinstance(p, ToolReturnPart))
        if ret.status != "succeeded":
            return f"That did not work: {ret.content}"
        value = _value(ret.content)
        if ret.tool_name == "files_write_file":
            return f"Saved. The server says: {value}."
        if ret.tool_name == "files_read_file":
            return f"It says: {value}"
        names = value if isinstance(value, list) else []
        return f"You have {len(names)} notes: {', '.join(map(str, names))}." if names else "You have no notes."
    if match := _SAVE.search(prompt):
        call = ToolCallPart(tool_name="files_write_file",
                            args={"path": match.group(1), "content": match.group(2).strip()})
    elif match := _READ.search(prompt):
        call = ToolCallPart(tool_name="files_read_file", args={"path": match.group(1)})
    else:
        call = ToolCallPart(tool_name="files_list_files", args={})
    if call.tool_name not in {t.name for t in info.tools}:
        return f"I cannot reach my notes (no {call.tool_name} tool): {json.dumps([t.name for t in info.tools])}"
    return ModelResponse(parts=[call], finish_reason="tool_calls")


agent = Agent(
    name="notes",
    model=FunctionModel(notes_model, model_name="notes-offline"),
    instructions="You keep the user's notes. Use the files tools for everything.",
    mcp_servers=[files],
)
"""The agent `towline run examples.mcp_files:agent "..."` runs."""
