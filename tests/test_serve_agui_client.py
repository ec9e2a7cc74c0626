"""The official `@ag-ui/client` (from npm) against a live `towline serve`, with the docs' scripts as
written: `approve.mjs` (docs/human-in-the-loop.md) sees the run's approval as the interrupt
outcome of `RUN_FINISHED` and resumes the thread with an approval; `pick_color.mjs`
(docs/client-tools.md) offers a front-end tool in its `RunAgentInput.tools`, sees the call in
`pendingToolCallIds`, and sends the result back as a `tool` message. Each server is the docs'
command as a subprocess, with its in-process worker, on the session's dev server; what the run
recorded is then read from it. A resume or a result the run refuses ends that AG-UI run with
`RUN_ERROR`, and the run goes on.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from npm_packages import node_env, node_project, npm_folder, npm_lock
from readme import REPO, cli_env, readme, readme_process
from temporalio.client import Client
from test_serve import _serving, _stop  # pyright: ignore[reportPrivateUsage]

from towline.runtime.plugin import TowlinePlugin

pytestmark = pytest.mark.timeout(300)


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


def _page(name: str) -> str:
    return (REPO / "docs" / name).read_text(encoding="utf-8")


def _script(page: str, name: str) -> str:
    """The ```js block of `page` that starts with `// NAME`."""
    blocks: list[str] = re.findall(r"^```js\n(.*?)^```", page, flags=re.DOTALL | re.MULTILINE)
    (found,) = [b for b in blocks if b.startswith(f"// {name}\n")]
    return found


def _output(page: str, first: str) -> list[str]:
    """The lines of the output block whose first line starts with `first`."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    return lines[start:lines.index("```", start)]


async def _project(tmp_path: Path) -> Path:
    folder = npm_folder("@ag-ui/client")
    with npm_lock(folder):  # the docs' install command, in the cached folder: nothing to fetch
        installed = await readme("npm install @ag-ui/client", cwd=folder, env=node_env(), timeout=300)
    assert installed.code == 0, installed
    return node_project(tmp_path / "client", folder)


async def _thread(tclient: Client, prefix: str) -> str:
    """The one session whose workflow id starts with `prefix` (the visibility store may lag)."""
    for _ in range(150):
        found = [w.id async for w in tclient.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'")]
        if found:
            (thread,) = found
            return thread
        await asyncio.sleep(0.2)
    raise AssertionError(f"no session {prefix}* listed")


async def _sse(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        return [json.loads(line[6:]) async for line in response.aiter_lines()
                if line.startswith("data: ")]


async def test_the_agui_client_resumes_an_interrupt_with_an_approval(
    target: str, namespace: str, tclient: Client, tmp_path: Path
) -> None:
    page = _page("human-in-the-loop.md")
    project = await _project(tmp_path)
    (project / "approve.mjs").write_text(_script(page, "approve.mjs"), encoding="utf-8")
    process = await readme_process("towline serve --agent examples.research:agent",
                                   env=cli_env(target, namespace))
    try:
        base = await _serving(process)
        done = await readme("node approve.mjs", cwd=project, timeout=120,
                            env=node_env({"TOWLINE_SERVE_URL": base}))
        assert done.code == 0, done
        assert done.out.splitlines() == _output(page, "tool_approval: read_file"), done.out
        # the run: one durable session whose audit trail has the client's approval
        thread = await _thread(tclient, "research-node-")
        handle = tclient.get_workflow_handle(thread)
        state: dict[str, Any] = await handle.query("state")
        (approved,) = [d for d in state["decisions"] if d["decision"] == "approved"]
        assert (approved["call_id"], approved["by"], approved["reason"], approved["source"]) == (
            "read_0", "node", "a public file", "person")
        assert state["counters"]["tool_calls"] == 1 and state["status"] == "waiting"

        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            # a resume naming an interrupt that is not waiting (the call was decided): refused
            stale = await _sse(http, "/agents/research", {
                "threadId": thread, "runId": "again", "messages": [],
                "resume": [{"interruptId": f"read_0@{approved['digest']}", "status": "resolved",
                            "payload": {"decision": "approve"}}]})
            assert [e["type"] for e in stale] == ["RUN_STARTED", "RUN_ERROR"]
            assert "no tool call 'read_0' is waiting for a decision" in stale[-1]["message"]
            # a payload that is no decision: refused before anything is sent
            bad = await http.post("/agents/research", json={
                "threadId": thread, "runId": "bad", "messages": [],
                "resume": [{"interruptId": "read_0", "status": "resolved", "payload": {"ok": 1}}]})
            assert bad.status_code == 422 and "decision" in bad.json()["error"]
        assert (await handle.query("state"))["counters"]["tool_calls"] == 1  # nothing re-ran
    finally:
        await _stop(process)


async def test_the_agui_client_runs_a_front_end_tool(
    target: str, namespace: str, tclient: Client, tmp_path: Path
) -> None:
    page = _page("client-tools.md")
    project = await _project(tmp_path)
    (project / "pick_color.mjs").write_text(_script(page, "pick_color.mjs"), encoding="utf-8")
    process = await readme_process("towline serve --agent examples.frontend:web_agent",
                                   env=cli_env(target, namespace))
    try:
        base = await _serving(process)
        done = await readme("node pick_color.mjs", cwd=project, timeout=120,
                            env=node_env({"TOWLINE_SERVE_URL": base}))
        assert done.code == 0, done
        assert done.out.splitlines() == _output(page, 'pick_color({"prompt": "Which color?"})'), done.out
        thread = await _thread(tclient, "frontend-node-")
        handle = tclient.get_workflow_handle(thread)
        state: dict[str, Any] = await handle.query("state")
        (answered,) = [d for d in state["decisions"] if d["decision"] == "result"]
        assert (answered["call_id"], answered["tool"], answered["result"], answered["source"]) == (
            "pick_1", "pick_color", {"color": "teal"}, "client")

        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            # the same result sent again: the call is not pending, the run refuses it
            again = await _sse(http, "/agents/frontend-web", {
                "threadId": thread, "runId": "again", "messages": [
                    {"id": "m1", "role": "user", "content": "Pick a color for the logo"},
                    {"id": "r1", "role": "tool", "toolCallId": "pick_1", "content": '"red"'}]})
            assert [e["type"] for e in again] == ["RUN_STARTED", "RUN_ERROR"]
            assert "pick_1" in again[-1]["message"]
            # without the tool offered, a new thread's model has no picker: it says so
            plain = await _sse(http, "/agents/frontend-web", {
                "threadId": f"{thread}-plain", "runId": "r", "messages": [
                    {"id": "m1", "role": "user", "content": "Pick a color"}]})
            assert plain[-1]["type"] == "RUN_FINISHED"
            assert plain[-1]["result"].startswith("I have no color picker here")
        state = await handle.query("state")
        assert [d["result"] for d in state["decisions"] if d["decision"] == "result"] == [
            {"color": "teal"}]
    finally:
        await _stop(process)
