"""MCP servers as tool sources: listing, calls and results, against real MCP servers.

The server is `tests/mcp_servers.py` (the `mcp` SDK's `MCPServer`), started by the
worker over stdio or by the test over streamable HTTP on a free 127.0.0.1 port.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from mcp_helpers import HttpServer, executed_tools, scheduled, stdio_server, stop_pids
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.worker import Replayer

from scripts import Script, call, calls, returns, text
from towline import Agent, ModelResponse, tool
from towline.client import run, start_run
from towline.errors import ConfigurationError, RunError
from towline.mcp import MCPServer, expand_env
from towline.messages import Message
from towline.models import ModelInfo
from towline.runtime.payloads import PAYLOAD_LIMIT
from towline.runtime.plugin import TowlinePlugin
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def stdio_root(tmp_path: Path) -> Iterator[Path]:
    """The counting directory of stdio servers; any server left running is stopped."""
    root = tmp_path / "stdio"
    root.mkdir()
    yield root
    stop_pids(root)


@pytest_asyncio.fixture
async def http_mcp(tmp_path: Path) -> AsyncIterator[HttpServer]:
    """The test server over streamable HTTP on a free port."""
    root = tmp_path / "http"
    root.mkdir()
    server = HttpServer(root)
    await server.start()
    yield server
    server.kill()
    stop_pids(root)


def _server(transport: str, stdio_root: Path, http: HttpServer, name: str = "t", **options: Any) -> MCPServer:
    if transport == "stdio":
        return stdio_server(name, stdio_root, **options)
    return http.definition(name, **options)


def _by_name(messages: list[Message]) -> dict[str, tuple[str, Any]]:
    return {r.tool_name: (r.status, r.content) for r in returns(messages)}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_listed_tools_join_the_inventory_and_run_as_activities(
    client: Client, transport: str, stdio_root: Path, http_mcp: HttpServer
) -> None:
    script = Script([calls(call("t_add", {"a": 2, "b": 3}), call("t_echo", {"text": "hi"})),
                     text("2 + 3 = 5")])
    agent = Agent(name=f"mcp-list-{transport}", model=script.model,
                  mcp_servers=[_server(transport, stdio_root, http_mcp)])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "add", task_queue=queue)
        result = await handle.result()
        history = await handle.fetch_history()

    offered = {d.name: d for d in script.seen[0].info.tools}
    assert {"t_add", "t_echo", "t_record", "t_picture"} <= set(offered)
    assert offered["t_add"].description == "Add two integers."
    assert offered["t_add"].parameters_json_schema["required"] == ["a", "b"]
    assert offered["t_add"].metadata == {"mcp_server": "t", "mcp_tool": "add"}
    assert _by_name(result.messages) == {
        "t_add": ("succeeded", {"result": 5}), "t_echo": ("succeeded", {"result": "hi"}),
    }
    assert result.output == "2 + 3 = 5"
    assert result.counters.tool_calls == 2
    # listed once (an activity recorded in the history), each call its own activity
    assert scheduled(history) == [
        ("towline.mcp.t.list_tools", "t · list tools"),
        ("towline.model_request", f"{script.name} · step 1"),
        ("towline.tool.t_add", "t_add(a=2, b=3)"),
        ("towline.tool.t_echo", 't_echo(text="hi")'),
        ("towline.model_request", f"{script.name} · step 2"),
    ]


async def test_errors_images_and_large_results_map_to_tool_returns(
    client: Client, stdio_root: Path
) -> None:
    script = Script([
        calls(call("t_fail", {"message": "no"}), call("t_picture", {"caption": "a dot"}),
              call("t_big", {"size": PAYLOAD_LIMIT + 1000}), call("t_add", {"a": "two"}),
              call("t_nothing", {}), call("t_big_picture", {"caption": "huge", "size": PAYLOAD_LIMIT})),
        text("done"),
    ])
    agent = Agent(name="mcp-results", model=script.model, mcp_servers=[stdio_server("t", stdio_root)])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)

    got = _by_name(result.messages)
    # isError is a failed return the model sees (and counts against the tool's retries)
    assert got["t_fail"] == ("failed", "refused: no")
    assert result.counters.tool_retries["t_fail"] == 1
    status, content = got["t_picture"]
    assert status == "succeeded"
    assert content[0] == {"type": "text", "text": "a dot"}
    assert content[1]["type"] == "image" and content[1]["mime_type"] == "image/png"
    assert content[1]["data"].startswith("iVBORw0KGgo")  # base64 PNG
    status, content = got["t_big"]
    assert status == "succeeded" and "exceeds the" in content and "payload limit" in content
    # an image too large for the history loses its data, not the text beside it
    status, content = got["t_big_picture"]
    assert status == "succeeded" and content[0] == {"type": "text", "text": "huge"}
    assert content[1]["type"] == "image" and "data" not in content[1]
    assert "over the payload limit" in content[1]["omitted"]
    # arguments are checked against the listed JSON schema in the workflow: nothing is sent
    status, errors = got["t_add"]
    assert status == "validation_error"
    assert {(tuple(e["loc"]), e["type"]) for e in errors} == {((), "json_schema"), (("a",), "json_schema")}
    assert got["t_nothing"] == ("denied", "unknown tool 't_nothing'")
    assert executed_tools(stdio_root) == []  # the invalid `add` never reached the server
    # the model was shown each return
    last = script.seen[1].messages
    assert {r.tool_name for r in returns(last)} == set(got)


@tool
def add(a: int, b: int) -> int:
    """The agent's own add."""
    return a + b


async def test_prefixes_filters_and_name_clashes(
    client: Client, stdio_root: Path, http_mcp: HttpServer
) -> None:
    script = Script([calls(call("add", {"a": 1, "b": 1}), call("calc-add", {"a": 2, "b": 2}),
                           call("echo", {"text": "bare"}), call("dotted_echo", {"text": "dot"}),
                           call("dotted.echo", {"text": "dot"})), text("ok")])
    agent = Agent(
        name="mcp-names", model=script.model, tools=[add],
        mcp_servers=[
            # no prefix: the server's `add` clashes with the agent's own tool and is left out
            stdio_server("bare", stdio_root, prefix="", tools=["add", "echo", "dotted.echo"]),
            http_mcp.definition("math", prefix="calc-", tools=["add"]),
        ],
    )
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)

    assert [d.name for d in script.seen[0].info.tools] == ["add", "echo", "dotted_echo", "calc-add"]
    assert _by_name(result.messages) == {
        "add": ("succeeded", 2), "calc-add": ("succeeded", {"result": 4}),
        "echo": ("succeeded", {"result": "bare"}), "dotted_echo": ("succeeded", {"result": "dot"}),
        "dotted.echo": ("denied", "unknown tool 'dotted.echo'"),
    }


def test_worker_environment_variables_expand_with_defaults() -> None:
    environ = {"TOKEN": "abc", "EMPTY": ""}
    assert expand_env("Bearer ${TOKEN}", environ) == "Bearer abc"
    assert expand_env("${MISSING:-notes}/${TOKEN}", environ) == "notes/abc"
    assert expand_env("${EMPTY:-fallback}|${EMPTY}", environ) == "fallback|"
    assert expand_env("$TOKEN ${ not a variable", environ) == "$TOKEN ${ not a variable"
    with pytest.raises(ConfigurationError, match="MISSING is not set on the worker"):
        expand_env("${MISSING}", environ)


async def test_an_unset_variable_is_reported_when_the_worker_connects(client: Client) -> None:
    server = MCPServer(name="cfg", url="http://127.0.0.1:1/mcp",
                       headers={"Authorization": "Bearer ${TOWLINE_TEST_UNSET_TOKEN}"},
                       retry_policy=_FAST)
    agent = Agent(name="mcp-unset", model=Script([text("never")]).model, mcp_servers=[server])
    async with towline_worker(client, [agent]) as (tclient, queue):
        with pytest.raises(RunError) as caught:
            await run(tclient, agent, "go", task_queue=queue)
    assert caught.value.reason == "MCPServerUnavailable"
    assert "TOWLINE_TEST_UNSET_TOKEN is not set on the worker" in caught.value.message


def test_definitions_are_checked_when_built() -> None:
    with pytest.raises(ConfigurationError, match="either command"):
        MCPServer(name="x")
    with pytest.raises(ConfigurationError, match="either command"):
        MCPServer(name="x", command="srv", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigurationError, match="letters, digits"):
        MCPServer(name="a.b", command="srv")
    with pytest.raises(ConfigurationError, match="headers are for HTTP"):
        MCPServer(name="x", command="srv", headers={"a": "b"})
    with pytest.raises(ConfigurationError, match="positive timedelta"):
        MCPServer(name="x", command="srv", timeout=timedelta(0))
    with pytest.raises(ConfigurationError, match="two MCP servers are named 'x'"):
        Agent(name="a", mcp_servers=[MCPServer(name="x", command="a"), MCPServer(name="x", command="b")])
    with pytest.raises(ConfigurationError, match="two MCP servers are prefixed 'p_'"):
        Agent(name="a", mcp_servers=[MCPServer(name="x", command="a", prefix="p_"),
                                     MCPServer(name="y", command="b", prefix="p_")])
    with pytest.raises(ConfigurationError, match="mcp_list_tools"):
        Agent(name="a", mcp_list_tools="sometimes")  # pyright: ignore[reportArgumentType]
    # env and headers (secrets) are not shown by repr
    assert "s3cret" not in repr(MCPServer(name="x", url="http://h/mcp", headers={"A": "s3cret"}))
    a = Agent(name="one", mcp_servers=[MCPServer(name="x", command="a")])
    b = Agent(name="two", mcp_servers=[MCPServer(name="x", command="b")])
    with pytest.raises(ConfigurationError, match="two different MCP servers are named 'x'"):
        TowlinePlugin([a, b])


async def test_secrets_reach_the_server_but_never_the_history(
    client: Client, stdio_root: Path, http_mcp: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cret-token-" + "9" * 8
    digest = hashlib.sha256(secret.encode()).hexdigest()[:12]
    monkeypatch.setenv("TOWLINE_TEST_TRACKER_TOKEN", secret)  # the worker's environment
    script = Script([calls(call("env_secret_digest"), call("hdr_secret_digest")), text("ok")])
    agent = Agent(name="mcp-secrets", model=script.model, mcp_servers=[
        stdio_server("env", stdio_root, env={"TEST_SECRET": secret}),
        # read from the worker's environment when it connects: not even in the definition
        http_mcp.definition("hdr", headers={"X-Test-Secret": "${TOWLINE_TEST_TRACKER_TOKEN}"}),
    ])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "go", task_queue=queue)
        result = await handle.result()
        history = await handle.fetch_history()
    assert _by_name(result.messages) == {
        "env_secret_digest": ("succeeded", {"result": digest}),
        "hdr_secret_digest": ("succeeded", {"result": digest}),
    }
    recorded = history.to_json()
    assert secret not in recorded and "X-Test-Secret" not in recorded
    assert http_mcp.url not in recorded and str(stdio_root) not in recorded


def _grow_then_use(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    names = [d.name for d in info.tools]
    if info.run_step == 1:
        return calls(call("t_grow", {"name": "fresh"}))
    if info.run_step == 2:
        return calls(call("t_fresh", {"text": "hello"}), call("t_shrink", {"name": "echo"}))
    return json.dumps(names)


@pytest.mark.parametrize("mode", ["per_turn", "per_run"])
async def test_tools_a_server_gains_or_loses_mid_run(
    client: Client, mode: str, http_mcp: HttpServer
) -> None:
    script = Script([_grow_then_use] * 3)
    agent = Agent(name=f"mcp-{mode}", model=script.model, mcp_list_tools=mode,  # pyright: ignore[reportArgumentType]
                  mcp_servers=[http_mcp.definition("t")])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "go", task_queue=queue)
        result = await handle.result()
        history = await handle.fetch_history()
    offered = [[d.name for d in s.info.tools] for s in script.seen]
    lists = [a for a, _ in scheduled(history) if a == "towline.mcp.t.list_tools"]
    got = _by_name(result.messages)
    if mode == "per_turn":
        assert len(lists) == 3  # before every turn
        assert "t_fresh" not in offered[0] and "t_fresh" in offered[1] and "t_fresh" in offered[2]
        assert "t_echo" in offered[1] and "t_echo" not in offered[2]
        assert got["t_fresh"] == ("succeeded", {"result": "fresh: hello"})
    else:
        assert len(lists) == 1  # once per run: the run keeps the tools it started with
        assert offered[0] == offered[1] == offered[2]
        assert got["t_fresh"] == ("denied", "unknown tool 't_fresh'")
    assert got["t_shrink"] == ("succeeded", {"result": "removed echo"})


async def test_replay_never_talks_to_the_server(
    client: Client, http_mcp: HttpServer
) -> None:
    script = Script([calls(call("t_add", {"a": 20, "b": 22})), text("42")])
    agent = Agent(name="mcp-replay", model=script.model, mcp_servers=[http_mcp.definition("t")])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "go", task_queue=queue)
        await handle.result()
        history = await handle.fetch_history()
    http_mcp.kill()  # nothing to talk to: the listing and the call come from the history
    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin([agent])])
    outcome = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert outcome.replay_failure is None


_FAST = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=2)


async def test_a_required_server_that_cannot_be_listed_fails_the_run(client: Client, tmp_path: Path) -> None:
    from ports import free_port

    down = MCPServer(name="down", url=f"http://127.0.0.1:{free_port()}/mcp", retry_policy=_FAST)
    agent = Agent(name="mcp-down", model=Script([text("never")]).model, mcp_servers=[down])
    async with towline_worker(client, [agent]) as (tclient, queue):
        with pytest.raises(RunError) as caught:
            await run(tclient, agent, "go", task_queue=queue)
    assert caught.value.reason == "MCPServerUnavailable"
    assert "'down' could not be listed" in caught.value.message
    assert "unreachable" in caught.value.message


async def test_an_optional_server_that_cannot_be_listed_is_left_out(
    client: Client, http_mcp: HttpServer
) -> None:
    from ports import free_port

    down = MCPServer(name="down", url=f"http://127.0.0.1:{free_port()}/mcp", retry_policy=_FAST,
                     required=False)
    script = Script([calls(call("up_echo", {"text": "still here"})), text("ok")])
    agent = Agent(name="mcp-optional", model=script.model,
                  mcp_servers=[down, http_mcp.definition("up", tools=["echo"])])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)
    assert [d.name for d in script.seen[0].info.tools] == ["up_echo"]
    assert _by_name(result.messages) == {"up_echo": ("succeeded", {"result": "still here"})}


async def test_continue_as_new_keeps_the_listed_tools(client: Client, http_mcp: HttpServer) -> None:
    def tick(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        if info.run_step <= 4:
            return calls(call("t_add", {"a": info.run_step, "b": 1}))
        return f"{len(returns(messages))} sums"

    script = Script([tick] * 5)
    agent = Agent(name="mcp-can", model=script.model, mcp_servers=[http_mcp.definition("t")])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await tclient.start_workflow(
            "AgentRun", {"agent": agent.name, "prompt": "go", "continue_as_new_after_events": 20},
            id=f"mcp-can-{queue}", task_queue=queue,
        )
        try:
            output = (await handle.result())["output"]
        except WorkflowFailureError as e:  # pragma: no cover - shown if it happens
            raise AssertionError(str(e.cause)) from e
        histories = await execution_histories(tclient, handle.id, handle.first_execution_run_id)
        executions_seen = len(histories)
        lists = sum(1 for history in histories for a, _ in scheduled(history)
                    if a == "towline.mcp.t.list_tools")
    assert output == "4 sums"
    assert executions_seen > 1, "the run continued as new"
    assert lists == 1, "listed once per run, not once per execution"
