"""A small MCP server for the tests, written with the `mcp` SDK's server side (`MCPServer`).

    python tests/mcp_servers.py stdio --dir DIR
    python tests/mcp_servers.py http --port PORT --dir DIR

The same tools over stdio (a worker starts it) or streamable HTTP on 127.0.0.1 (a
test starts it). Effects are counted in files under DIR, keyed by the idempotency
key towline sends in each call's `_meta`, so a test can tell attempts from effects:

- `pids/<pid>`: written at start (the test stops what it started, by pid);
- `exec/<key>`: one line per execution of a call (every attempt);
- `effects.log`: one line per applied effect (a call whose key was seen is not re-applied
  by the idempotent tools, and is applied again by `record`);
- `started/<key>`: written by `slow_record` once its effect is applied and it waits.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

ROOT = Path(".")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""

server = MCPServer("towline-test-server", instructions="Tools for towline's tests.", log_level="WARNING")


def _key(ctx: Context) -> str:
    meta: Any = ctx.request_context.meta or {}
    return str(meta.get("towline/idempotency_key", "no-key")).replace("/", "__")


def _count(ctx: Context, tool: str) -> str:
    key = _key(ctx)
    path = ROOT / "exec" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f"{tool}\n")
    return key


def _apply(key: str, label: str, *, once: bool) -> bool:
    """Record the effect; with `once`, only if this key has not been applied before."""
    marker = ROOT / "effect" / key
    marker.parent.mkdir(parents=True, exist_ok=True)
    if once:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    with (ROOT / "effects.log").open("a") as f:
        f.write(f"{key} {label}\n")
    return True


@server.tool()
def add(a: int, b: int, ctx: Context) -> int:
    """Add two integers."""
    _count(ctx, "add")
    return a + b


@server.tool()
def echo(text: str, ctx: Context) -> str:
    """Echo the text back."""
    _count(ctx, "echo")
    return text


@server.tool(name="dotted.echo")
def dotted_echo(text: str) -> str:
    """Echo the text back (a tool whose name is no valid model tool name)."""
    return text


@server.tool()
def fail(message: str) -> CallToolResult:
    """Report an error (isError) with the message."""
    return CallToolResult(content=[TextContent(type="text", text=f"refused: {message}")], is_error=True)


@server.tool(structured_output=False)
def picture(caption: str) -> list[Any]:
    """A 1x1 PNG image and a caption."""
    return [caption, Image(data=PNG, format="png")]


@server.tool(structured_output=False)
def big_picture(caption: str, size: int) -> list[Any]:
    """A caption and an image of `size` bytes (too big to keep, past some size)."""
    return [caption, Image(data=b"\x89PNG" + b"x" * size, format="png")]


@server.tool()
def big(size: int) -> str:
    """A text of `size` characters."""
    return "x" * size


@server.tool()
def record(label: str, ctx: Context) -> str:
    """Record `label` (not idempotent: every execution applies its effect)."""
    _apply(_count(ctx, "record"), label, once=False)
    return f"recorded {label}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def put(label: str, ctx: Context) -> str:
    """Record `label` once per call (idempotent: keyed by the call's idempotency key)."""
    _apply(_count(ctx, "put"), label, once=True)
    return f"put {label}"


@server.tool()
async def slow_record(label: str, seconds: float, ctx: Context) -> str:
    """Record `label` once per call, then work for `seconds`, reporting progress."""
    key = _count(ctx, "slow_record")
    if _apply(key, label, once=True):
        marker = ROOT / "started" / key
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(label)
        for i in range(int(seconds * 5)):
            await ctx.report_progress(i, seconds * 5, f"working on {label}")
            await asyncio.sleep(0.2)
    return f"slow {label} done"


@server.tool()
def die(label: str, ctx: Context) -> str:
    """Record `label`, then exit the server process mid-call (the connection is lost)."""
    _apply(_count(ctx, "die"), label, once=False)
    sys.stdout.flush()
    os._exit(3)


@server.tool()
def put_then_die(label: str, ctx: Context) -> str:
    """Record `label` once per call; the first execution of a call exits the server mid-call."""
    if _apply(_count(ctx, "put_then_die"), label, once=True):
        os._exit(3)
    return f"put {label}"


@server.tool()
def secret_digest(ctx: Context) -> str:
    """A digest of the secret this server was given (HTTP: `X-Test-Secret`; stdio: `TEST_SECRET`)."""
    request: Any = ctx.request_context.request
    secret = request.headers.get("x-test-secret", "") if request is not None else os.environ.get("TEST_SECRET", "")
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


@server.tool()
def grow(name: str) -> str:
    """Add a tool `name` to this server (it echoes its text, prefixed with its name)."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"Added at run time as {name}.")
    return f"added {name}"


@server.tool()
def shrink(name: str) -> str:
    """Remove the tool `name` from this server."""
    server.remove_tool(name)
    return f"removed {name}"


def main(argv: list[str] | None = None) -> int:
    """Serve over stdio or streamable HTTP until stopped."""
    global ROOT
    parser = argparse.ArgumentParser(description="towline's MCP test server")
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--dir", required=True, help="where effects are counted")
    parser.add_argument("--port", type=int, default=0, help="HTTP port on 127.0.0.1")
    args = parser.parse_args(argv)
    ROOT = Path(args.dir)
    pid = ROOT / "pids" / str(os.getpid())
    pid.parent.mkdir(parents=True, exist_ok=True)
    pid.write_text(args.transport)
    if args.transport == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
