"""Helpers for the MCP tests: the test server (`tests/mcp_servers.py`) over stdio and HTTP.

`stdio_server(...)` is an `MCPServer` definition a worker starts itself; `HttpServer`
runs the same server over streamable HTTP on a free 127.0.0.1 port, as a process
the test starts, restarts and stops (by pid). Effects the server applied are read
back from its counting directory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from forkserver import ForkedPopen, script_process
from ports import free_port
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from towline.mcp import MCPServer

__all__ = [
    "stdio_launch",
    "SERVER_SCRIPT",
    "stdio_server",
    "http_server",
    "HttpServer",
    "effects",
    "executions",
    "executed_tools",
    "server_pids",
    "stop_pids",
    "wait_for",
    "scheduled",
    "attempts",
]

SERVER_SCRIPT = Path(__file__).with_name("mcp_servers.py")


def stdio_launch(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`MCPServer` options that start the test server over stdio with `args`: through the
    launcher of the worker's test process, forked from its zygote (`tests/fork_launcher.py`;
    the `mcp` SDK is imported there once), or by this interpreter where there is none."""
    launch = {"TOWLINE_FORK_SOCKET": "${TOWLINE_FORK_SOCKET:-}",
              "TOWLINE_FORK_SEED": "${TOWLINE_FORK_SEED:-}",
              "PYTHONHASHSEED": "${TOWLINE_FORK_SEED:-random}"}
    return {"command": f"${{TOWLINE_FORK_PYTHON:-{sys.executable}}}",
            "args": [str(SERVER_SCRIPT), *args], "env": {**launch, **(env or {})}}


def stdio_server(name: str, root: Path, **options: Any) -> MCPServer:
    """The test server over stdio (the worker starts it), counting under `root`."""
    return MCPServer(name=name, **stdio_launch("stdio", "--dir", str(root), env=options.pop("env", None)),
                     **options)


def http_server(name: str, port: int, **options: Any) -> MCPServer:
    """A definition of the test server at `http://127.0.0.1:<port>/mcp`."""
    return MCPServer(name=name, url=f"http://127.0.0.1:{port}/mcp", **options)


class HttpServer:
    """The test server over streamable HTTP, as a process of the test."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._process: subprocess.Popen[bytes] | ForkedPopen | None = None

    def definition(self, name: str, **options: Any) -> MCPServer:
        """An `MCPServer` pointing at this server."""
        return http_server(name, self.port, **options)

    def launch(self) -> None:
        """Start the process (without waiting for it to listen): forked from the test process's
        zygote where it can be (`forkserver`; the `mcp` SDK is imported there once)."""
        args = ["http", "--port", str(self.port), "--dir", str(self.root)]
        with (self.root / f"http-{self.port}.log").open("ab") as log:
            self._process = script_process(SERVER_SCRIPT, args, env=os.environ,
                                           cwd=Path.cwd(), output=log.fileno())

    async def start(self) -> None:
        """Start the process and wait until it accepts connections."""
        self.launch()

        def accepting() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        await wait_for(accepting, timeout=30)

    def kill(self) -> None:
        """SIGKILL the process (a crash) and reap it."""
        process = self._process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        self._process = None

    async def restart(self) -> None:
        """Kill and start again on the same port."""
        self.kill()
        await self.start()


def _counts(path: Path) -> dict[str, int]:
    if not path.is_dir():
        return {}
    return {p.name: len(p.read_text().splitlines()) for p in path.iterdir()}


def executions(root: Path) -> dict[str, int]:
    """Executions (attempts) per call key, as the server saw them."""
    return _counts(root / "exec")


def executed_tools(root: Path) -> list[str]:
    """The server-side name of every tool execution that counts itself, sorted."""
    folder = root / "exec"
    if not folder.is_dir():
        return []
    return sorted(line for p in folder.iterdir() for line in p.read_text().splitlines())


def effects(root: Path) -> list[str]:
    """Applied effects, in order: `<key> <label>` lines."""
    log = root / "effects.log"
    return log.read_text().splitlines() if log.exists() else []


def server_pids(root: Path) -> list[int]:
    """Pids of every server process started with this counting directory."""
    folder = root / "pids"
    return sorted(int(p.name) for p in folder.iterdir()) if folder.is_dir() else []


def stop_pids(root: Path) -> None:
    """SIGKILL every server process of `root` that is still running (they were started for it)."""
    for pid in server_pids(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def wait_for(probe: Any, timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll `probe()` (sync or async) until it returns something truthy; that value."""
    async with asyncio.timeout(timeout):
        while True:
            value = probe()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(interval)


def scheduled(history: WorkflowHistory) -> list[tuple[str, str]]:
    """Every scheduled activity: (activity type, summary), in order."""
    converter = DataConverter.default.payload_converter
    found: list[tuple[str, str]] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            summary = (converter.from_payload(e.user_metadata.summary, str)
                       if e.user_metadata.HasField("summary") else "")
            found.append((attrs.activity_type.name, summary))
    return found


def attempts(history: WorkflowHistory, activity_type: str) -> list[int]:
    """The attempt number each activity of that type completed or failed with, in order."""
    types = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
             for e in history.events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    found: list[int] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = e.activity_task_started_event_attributes
            if types.get(attrs.scheduled_event_id) == activity_type:
                found.append(attrs.attempt)
    return found
