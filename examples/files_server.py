"""A filesystem-style MCP server over stdio: notes in one folder (the `mcp` SDK's `MCPServer`).

    python examples/files_server.py --root notes [--slow SECONDS]

Tools: `list_files()`, `read_file(path)` and `write_file(path, content)`, confined to
the folder `--root` (created if missing). `--slow` makes every write take that long
after writing, which leaves time to kill a worker in the middle of the call and watch
the run survive it. `examples/mcp_files.py` is an agent that uses it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("files", instructions="Notes kept as text files in one folder.",
                   log_level="WARNING")
ROOT = Path("notes")
SLOW = 0.0


def _inside(path: str) -> Path:
    """`path` within the root folder, or a tool error (no `..`, no absolute paths out)."""
    resolved = (ROOT / path).resolve()
    if not resolved.is_relative_to(ROOT.resolve()) or resolved == ROOT.resolve():
        raise ToolError(f"{path!r} is not a file in the notes folder")
    return resolved


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_files() -> list[str]:
    """The notes in the folder, by name."""
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file())


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_file(path: str) -> str:
    """The text of the note `path`."""
    target = _inside(path)
    if not target.is_file():
        raise ToolError(f"there is no note {path!r}")
    return target.read_text("utf-8")


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=True))
def write_file(path: str, content: str) -> str:
    """Write `content` to the note `path` (replacing it): doing it twice changes nothing more."""
    target = _inside(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, "utf-8")
    time.sleep(SLOW)
    return f"wrote {len(content)} characters to {path}"


def main(argv: list[str] | None = None) -> int:
    """Serve the folder over stdio until the client closes the connection."""
    global ROOT, SLOW
    parser = argparse.ArgumentParser(description="A notes folder as an MCP server (stdio).")
    parser.add_argument("--root", default="notes", help="the folder of the notes")
    parser.add_argument("--slow", type=float, default=0.0, help="seconds each write takes")
    args = parser.parse_args(argv)
    ROOT, SLOW = Path(args.root), args.slow
    ROOT.mkdir(parents=True, exist_ok=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
