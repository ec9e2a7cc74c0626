"""MCP calls under failure: server restarts, lost connections, and a worker SIGKILLed mid-call.

Every effect the test server applies is counted (keyed by the idempotency key towline
sends in `_meta`), so each test asserts what a user would notice: how many times a
call took effect, and what the run recorded.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import pytest
import pytest_asyncio
from cli_helpers import alive
from durable_agents import WorkerProcess
from mcp_helpers import (
    HttpServer,
    attempts,
    effects,
    executions,
    server_pids,
    stdio_server,
    stop_pids,
    wait_for,
)
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy

from scripts import Script, call, calls, returns, text
from towline import Agent, ModelResponse
from towline.client import run, run_error, start_run
from towline.errors import RunError
from towline.mcp import MCPServer, MCPToolSpec
from towline.messages import Message
from towline.models import ModelInfo
from towline.runtime.plugin import TowlinePlugin
from towline.testing import towline_worker

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(120)]

_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=300), backoff_coefficient=1.5,
                     maximum_attempts=20)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """The servers' counting directory; any server left running is stopped."""
    folder = tmp_path / "server"
    folder.mkdir()
    yield folder
    stop_pids(folder)


@pytest_asyncio.fixture
async def http_mcp(root: Path) -> AsyncIterator[HttpServer]:
    """The test server over streamable HTTP on a free port."""
    server = HttpServer(root)
    await server.start()
    yield server
    server.kill()


async def test_a_stdio_server_restarted_between_two_calls_of_one_run(client: Client, root: Path) -> None:
    killed: list[int] = []

    async def kill_the_server(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        (pid,) = [p for p in server_pids(root) if alive(p)]
        os.kill(pid, signal.SIGKILL)  # the server the worker started dies between the calls
        killed.append(pid)
        await wait_for(lambda: not alive(pid) or None)
        return calls(call("t_record", {"label": "second"}))

    script = Script([calls(call("t_record", {"label": "first"})), kill_the_server, text("done")])
    agent = Agent(name="mcp-stdio-restart", model=script.model, mcp_servers=[stdio_server("t", root)])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)

    assert [(r.status, r.content) for r in returns(result.messages)] == [
        ("succeeded", {"result": "recorded first"}), ("succeeded", {"result": "recorded second"}),
    ]
    # a non-idempotent tool: each call took effect exactly once, the second on a new server
    assert [line.split()[1] for line in effects(root)] == ["first", "second"]
    assert sorted(executions(root).values()) == [1, 1]
    assert len(server_pids(root)) == 2 and killed[0] in server_pids(root)


async def test_an_http_server_restarted_between_two_calls_of_one_run(
    client: Client, root: Path, http_mcp: HttpServer
) -> None:
    async def restart_the_server(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        await http_mcp.restart()
        return calls(call("t_record", {"label": "second"}))

    script = Script([calls(call("t_record", {"label": "first"})), restart_the_server, text("done")])
    agent = Agent(name="mcp-http-restart", model=script.model, mcp_servers=[http_mcp.definition("t")])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)

    assert [r.status for r in returns(result.messages)] == ["succeeded", "succeeded"]
    assert [line.split()[1] for line in effects(root)] == ["first", "second"]
    assert len(server_pids(root)) == 2


async def test_a_server_down_at_call_time_is_retried_by_temporal(
    client: Client, root: Path, http_mcp: HttpServer
) -> None:
    restarted: list[asyncio.Task[None]] = []

    async def take_the_server_down(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        http_mcp.kill()

        async def later() -> None:
            await asyncio.sleep(2)
            await http_mcp.start()

        restarted.append(asyncio.ensure_future(later()))
        return calls(call("t_record", {"label": "while down"}))

    script = Script([calls(call("t_echo", {"text": "up"})), take_the_server_down, text("done")])
    agent = Agent(name="mcp-down-retried", model=script.model,
                  mcp_servers=[http_mcp.definition("t", retry_policy=_RETRY)])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "go", task_queue=queue)
        result = await handle.result()
        history = await handle.fetch_history()
    await restarted[0]

    # not idempotent, but the request never reached the server: Temporal retried it
    assert [r.status for r in returns(result.messages)] == ["succeeded", "succeeded"]
    (attempt,) = attempts(history, "towline.tool.t_record")
    assert attempt >= 2
    assert [line.split(" ", 1)[1] for line in effects(root)] == ["while down"]


async def test_a_lost_connection_mid_call_is_unknown_for_a_non_idempotent_tool(
    client: Client, root: Path
) -> None:
    script = Script([calls(call("t_die", {"label": "gone"})), text("never")])
    agent = Agent(name="mcp-uncertain", model=script.model,
                  mcp_servers=[stdio_server("t", root, retry_policy=_RETRY)])
    async with towline_worker(client, [agent]) as (tclient, queue):
        with pytest.raises(RunError) as caught:
            await run(tclient, agent, "go", task_queue=queue)

    assert caught.value.reason == "UncertainToolEffect"
    partial = caught.value.partial
    assert partial is not None
    ((status, content),) = [(r.status, r.content) for r in returns(partial.messages)]
    assert status == "unknown" and "may have taken effect" in content
    assert [line.split()[1] for line in effects(root)] == ["gone"]
    assert list(executions(root).values()) == [1]  # never sent again


async def test_a_lost_connection_mid_call_is_retried_for_an_idempotent_tool(
    client: Client, root: Path
) -> None:
    script = Script([calls(call("t_put_then_die", {"label": "once"})), text("done")])
    agent = Agent(name="mcp-idempotent-retry", model=script.model, mcp_servers=[
        stdio_server("t", root, idempotent=["put_then_die"], retry_policy=_RETRY),
    ])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)

    assert [(r.status, r.content) for r in returns(result.messages)] == [
        ("succeeded", {"result": "put once"}),
    ]
    assert [line.split()[1] for line in effects(root)] == ["once"]  # one effect
    assert list(executions(root).values()) == [2]  # two executions, on two server processes
    assert len(server_pids(root)) == 2


def test_idempotency_comes_from_the_definition_or_trusted_hints() -> None:
    plain = MCPToolSpec(name="write")
    hinted = MCPToolSpec(name="read", read_only=True)
    server = MCPServer(name="s", command="srv", idempotent=["write"])
    assert server.is_idempotent(plain) and not server.is_idempotent(hinted)
    assert not MCPServer(name="s", command="srv").is_idempotent(hinted)
    assert MCPServer(name="s", command="srv", trust_hints=True).is_idempotent(hinted)
    assert MCPServer(name="s", command="srv", idempotent=True).is_idempotent(plain)


# --- a worker process SIGKILLed during an MCP call -------------------------------------------


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Worker processes of the test, killed at the end (their logs shown on failure)."""
    made: list[WorkerProcess] = []
    yield made
    for w in made:
        w.kill()
    if made:
        print(made[0].log())
    stop_pids(tmp_path / "server")


def _spawn(workers: list[WorkerProcess], target: str, namespace: str, queue: str, root: Path) -> WorkerProcess:
    w = WorkerProcess(target, queue, root, namespace, agents="mcp_agents:AGENTS")
    w.start()
    workers.append(w)
    return w


async def _killed_mid_call(
    agent_name: str, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> tuple[Client, str, list[int]]:
    """Start the run on one worker, SIGKILL it once the MCP call is under way, start another.

    Returns the client, the run's workflow id and the pids of the killed worker's servers.
    """
    tclient = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    queue = f"mcp-crash-{uuid4().hex[:8]}"
    first = _spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, agent_name, "go", task_queue=queue)
    await wait_for(lambda: (tmp_path / "server" / "started").is_dir(), timeout=60)
    first_servers = server_pids(tmp_path / "server")
    first.kill()
    _spawn(workers, target, namespace, queue, tmp_path)
    return tclient, handle.id, first_servers


async def test_worker_killed_during_an_idempotent_mcp_call(
    target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    tclient, workflow_id, first_servers = await _killed_mid_call(
        "mcp-crash-idempotent", target, namespace, tmp_path, workers)
    handle = tclient.get_workflow_handle(workflow_id)
    result = await handle.result()
    history = await handle.fetch_history()
    root = tmp_path / "server"

    assert result["output"] == "succeeded: {'result': 'slow first done'}"
    assert [line.split()[1] for line in effects(root)] == ["first"]  # took effect once
    assert list(executions(root).values()) == [2]  # the new worker's server made it again
    assert attempts(history, "towline.tool.idem_slow_record") == [2]
    assert len(server_pids(root)) == 2  # the successor started its own server
    # the killed worker's server saw its stdin close and exited: no orphan is left behind
    await wait_for(lambda: not any(alive(p) for p in first_servers), timeout=30)


async def test_worker_killed_during_a_non_idempotent_mcp_call(
    target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    tclient, workflow_id, _ = await _killed_mid_call(
        "mcp-crash-uncertain", target, namespace, tmp_path, workers)
    handle = tclient.get_workflow_handle(workflow_id)
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    error = run_error(caught.value)
    root = tmp_path / "server"

    assert error.reason == "UncertainToolEffect"
    assert error.partial is not None
    assert [r.status for r in returns(error.partial.messages)] == ["unknown"]
    assert [line.split()[1] for line in effects(root)] == ["first"]
    assert list(executions(root).values()) == [1]  # the successor did not send it again
