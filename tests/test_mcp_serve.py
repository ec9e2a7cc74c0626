"""`towline mcp-serve`: agents as MCP tools, called by the `mcp` SDK's client.

The README's two commands run as subprocesses exactly as written (the Temporal server
given through `TEMPORAL_ADDRESS`): over stdio (the client launches it, through
`readme_stdio`) and over streamable HTTP (on port 8000, or the free port it picks and
prints when 8000 is taken).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import pytest_asyncio
from cli_helpers import towline
from mcp import Client as MCPClient
from mcp import StdioServerParameters
from mcp_helpers import wait_for
from ports import free_port
from readme import cli_env, read_until, readme_process, readme_stdio, stop_process
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from towline.client import run_error
from towline.runtime.plugin import TowlinePlugin

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
TOWLINE = str(Path(sys.executable).with_name("towline"))


def _env(target: str, namespace: str) -> dict[str, str]:
    return {"TEMPORAL_ADDRESS": target, "TEMPORAL_NAMESPACE": namespace}


class _Progress:
    """Collects a call's progress notifications."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.values: list[float] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.values.append(progress)
        self.messages.append(message or "")

    @property
    def workflow_id(self) -> str | None:
        first = self.messages[0] if self.messages else ""
        return first.split()[1] if first.startswith("run ") else None


async def _check_calculator_call(mcp: MCPClient, tclient: Client) -> None:
    listed = await mcp.list_tools()
    (tool,) = listed.tools
    assert tool.name == "run_calculator"
    assert tool.input_schema["required"] == ["prompt"]
    assert tool.input_schema["properties"]["prompt"]["type"] == "string"

    progress = _Progress()
    result = await mcp.call_tool("run_calculator", {"prompt": "What is 6 times 7?"},
                                 progress_callback=progress)
    assert not result.is_error
    assert [b.text for b in result.content if b.type == "text"] == ["6 times 7 is 42."]
    structured: dict[str, Any] = result.structured_content
    assert structured["output"] == "6 times 7 is 42."
    assert (structured["steps"], structured["tool_calls"]) == (2, 1)
    workflow_id = structured["workflow_id"]
    # progress followed the run's steps, in order, each notification a step further
    assert progress.workflow_id == workflow_id
    assert progress.messages[1:] == [
        "[step 1] model calls multiply(a=6.0, b=7.0)",
        "[step 1]   multiply -> 42  (succeeded)",
        "[step 2] model answers: 6 times 7 is 42.",
    ]
    assert progress.values == sorted(set(progress.values))
    # a durable run like any other: an AgentRun workflow the UI lists
    description = await tclient.get_workflow_handle(workflow_id).describe()
    assert description.workflow_type == "AgentRun"
    assert description.status == WorkflowExecutionStatus.COMPLETED


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    """A client with towline's data converter."""
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


async def test_mcp_serve_over_stdio_answers_an_sdk_client(
    target: str, namespace: str, tclient: Client
) -> None:
    # The README's command, launched by the MCP client as MCP clients do.
    params = readme_stdio("towline mcp-serve --agent examples.calculator:agent",
                          env=cli_env(target, namespace))
    async with MCPClient(params) as mcp:
        await _check_calculator_call(mcp, tclient)


async def test_mcp_serve_over_http_answers_an_sdk_client(
    target: str, namespace: str, tclient: Client, tmp_path: Path
) -> None:
    process = await readme_process("towline mcp-serve --agent examples.calculator:agent --http",
                                   env=cli_env(target, namespace))
    try:
        said = await read_until(process.stderr, "over http://")
        found = re.search(r"over (http://127\.0\.0\.1:\d+/mcp)", said)
        assert found, said
        url = found.group(1)

        async def answering() -> bool:
            try:
                async with MCPClient(url) as probe:
                    await probe.list_tools()
            except Exception:  # noqa: BLE001 - not listening yet
                return False
            return True

        await wait_for(answering, timeout=60, interval=0.3)
        async with MCPClient(url) as mcp:
            await _check_calculator_call(mcp, tclient)
    finally:
        stop_process(process, signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
    assert process.returncode == 0
    assert process.stderr is not None
    rest = (await process.stderr.read()).decode(errors="replace")
    assert "Traceback" not in rest and rest.rstrip().endswith("stopped"), rest  # a quiet stop


async def test_cancelling_the_mcp_request_cancels_the_run(
    target: str, namespace: str, tclient: Client
) -> None:
    queue = f"mcp-serve-{uuid4().hex[:8]}"
    params = StdioServerParameters(
        command=TOWLINE,
        args=["mcp-serve", "--agent", "mcp_serve_agents:waiting_agent", "--task-queue", queue],
        env=_env(target, namespace), cwd=str(TESTS),
    )
    async with MCPClient(params) as mcp:
        progress = _Progress()
        call = asyncio.ensure_future(mcp.call_tool("run_mcp-serve-waiting", {"prompt": "go"},
                                                   progress_callback=progress))
        workflow_id = await wait_for(lambda: progress.workflow_id, timeout=60)
        handle = tclient.get_workflow_handle(workflow_id)
        # the run waits (durably) for an approval, and the progress says so
        await wait_for(lambda: any(m.startswith("waiting for approval: launch(")
                                   for m in progress.messages), timeout=60)
        state: dict[str, Any] = await handle.query("state")
        assert state["status"] == "waiting"
        call.cancel()  # the client cancels its request
        with pytest.raises(asyncio.CancelledError):
            await call
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), timeout=60)
    assert run_error(caught.value).reason == "Cancelled"


async def test_mcp_serve_without_a_server_or_with_a_bad_agent_says_so() -> None:
    bad = await towline("mcp-serve", "--agent", "examples.calculator:nope", env=os.environ,
                        cwd=REPO, timeout=60)
    assert bad.code == 2
    assert bad.err.strip().splitlines()[-1] == (
        "towline: error: module 'examples.calculator' has no attribute 'nope'")
    port = free_port()
    down = await towline("mcp-serve", "--agent", "examples.calculator:agent",
                         env={**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}, cwd=REPO,
                         timeout=60)
    assert down.code == 1
    assert f"cannot reach the Temporal server at 127.0.0.1:{port}" in down.err
