"""A schema from outside (a client tool's `parameters` or `result_schema`, a web client's
`tools`) runs on the worker, inside workflow code: it may neither fetch anything nor run
unbounded (issue 40).

- A `$ref` to `file://` (it read the worker's file: a credentials JSON came back whole in the
  run's failure) or to `http://` (any URL fetched; one that never answers stalled the task
  forever) is refused when the run starts: `InvalidRunInput` naming the tool, nothing read,
  no request made.
- A `pattern` like `^(a+)+$` (Python's `re` backtracks: 35 characters froze the whole worker,
  and every worker that took the task next) runs on RE2: the call gets its validation error
  promptly, a client's result is refused promptly, and the worker keeps serving. A schema
  whose check is exponential without any regex (`anyOf` of two recursive branches) spends a
  bounded count of steps: a validation error too.
- An MCP server's listed schemas are held to the same rules (`tests/i40_schema_mcp.py`).
- Through `towline serve` (`examples.frontend:web_agent`): the AG-UI `RUN_ERROR` carries
  neither the file's content nor a library's raw exception text, and the server still stops
  on SIGTERM.

Real runs on the dev server, the worker a `towline worker` subprocess (a frozen worker must
not freeze the test: every wait is bounded).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from uuid import uuid4

import httpx
import pytest
import pytest_asyncio
from cli_helpers import TESTS_ON_PATH, towline_process
from hitl_agents import front, steps_prompt
from readme import cli_env, readme_process
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from test_serve import _serving, _stop  # pyright: ignore[reportPrivateUsage]
from test_serve_agui_client import _sse  # pyright: ignore[reportPrivateUsage]

from towline.client import run_error, start_run, with_towline
from towline.errors import RunEnded, RunError
from towline.results import ClientToolSpec, RunResult
from towline.review import pending, tool_result

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

WAIT = 60.0
"""A bound on every wait for the worker: a frozen or stalled one fails the test, never hangs it."""
SECRET = "s3cr3t-" + uuid4().hex
CREDENTIALS = {"type": "service_account", "project_id": "acme", "private_key": SECRET}
"""A credentials file as clouds hand them out (its `type` is no JSON-schema type)."""
REDOS = "^(a+)+$"
ATTACK = "a" * 50_000 + "!"
"""Far past the 35 characters that froze Python's `re`."""

Served = tuple[Client, str, asyncio.subprocess.Process]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(client: Client, target: str, namespace: str) -> AsyncIterator[Served]:
    """One `towline worker` subprocess serving `hitl_agents:front` for the module's runs."""
    queue = f"i40-schemas-{uuid4().hex[:8]}"
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH})
    proc = await towline_process("worker", "--agent", "hitl_agents:front", "--task-queue", queue,
                                 env=env)
    try:
        yield with_towline(client, [front]), queue, proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def _tool(name: str, parameters: dict[str, Any], result_schema: dict[str, Any] | None = None
          ) -> ClientToolSpec:
    return ClientToolSpec(name=name, description="A tool the client runs", parameters=parameters,
                          result_schema=result_schema)


async def _bounded(served: Served, what: Any, doing: str) -> Any:
    try:
        return await asyncio.wait_for(what, WAIT)
    except TimeoutError:
        proc = served[2]
        state = "alive" if proc.returncode is None else f"exited rc {proc.returncode}"
        raise AssertionError(f"{doing}: nothing within {WAIT}s (the worker is {state}: frozen "
                             "or stalled)") from None


async def _failure(served: Served, handle: WorkflowHandle[Any, Any]) -> RunError:
    with pytest.raises(WorkflowFailureError) as failed:
        await _bounded(served, handle.result(), "the run's end")
    return run_error(failed.value)


async def _history_bytes(handle: WorkflowHandle[Any, Any]) -> bytes:
    """The run's whole history as stored (payloads are raw JSON bytes in it)."""
    return b"".join(e.SerializeToString() for e in (await handle.fetch_history()).events)


async def _waiting(served: Served, handle: WorkflowHandle[Any, Any]) -> Any:
    async def first() -> Any:
        while not (calls := await pending(handle)):
            await asyncio.sleep(0.05)
        return calls[0]

    return await _bounded(served, first(), "a client call to wait")


async def _still_serves(served: Served) -> None:
    """A plain run on the same worker finishes: it was neither frozen nor wedged."""
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("lookup", {"q": "x"})]),
                             task_queue=queue)
    result: RunResult = await _bounded(served, handle.result(), "a plain run afterwards")
    assert result.output == "lookup=succeeded:found x"


@pytest.mark.parametrize("where", ["parameters", "result_schema"])
async def test_a_file_ref_reads_no_file(served: Served, tmp_path: Path, where: str) -> None:
    secret = tmp_path / "credentials.json"
    secret.write_text(json.dumps(CREDENTIALS), encoding="utf-8")
    ref = {"$ref": secret.as_uri()}
    schema = {"type": "object", "properties": {"prompt": ref}}
    spec = (_tool("grab", schema) if where == "parameters" else
            _tool("grab", {"type": "object"}, result_schema=schema))
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("grab", {"prompt": "hi"})]),
                             task_queue=queue, client_tools=[spec])
    err = await _failure(served, handle)
    assert err.reason == "InvalidRunInput", err
    assert "client tool 'grab'" in err.message and "refers outside the schema" in err.message, err
    assert SECRET not in err.message and "service_account" not in err.message
    assert SECRET.encode() not in await _history_bytes(handle)
    assert err.partial is not None and err.partial.counters.tool_calls == 0


class _Counting(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = json.dumps({"type": "string"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that serves a schema at any path and counts the requests."""
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_host() -> Iterator[str]:
    """A port that takes connections and never answers (the stalled task)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


async def test_an_http_ref_fetches_nothing(served: Served, schema_host: tuple[str, list[str]]) -> None:
    base, hits = schema_host
    schema = {"type": "object", "properties": {"prompt": {"$ref": f"{base}/prompt.json"}}}
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("fetchy", {"prompt": "hi"})]),
                             task_queue=queue, client_tools=[_tool("fetchy", schema)])
    err = await _failure(served, handle)
    assert err.reason == "InvalidRunInput" and "client tool 'fetchy'" in err.message, err
    assert hits == [], f"the worker requested {hits}"


async def test_a_ref_that_never_answers_stalls_nothing(served: Served, silent_host: str) -> None:
    schema = {"type": "object", "$defs": {}, "properties": {"prompt": {"$ref": f"{silent_host}/s"}}}
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("stall", {"prompt": "hi"})]),
                             task_queue=queue, client_tools=[_tool("stall", schema)])
    err = await _failure(served, handle)
    assert err.reason == "InvalidRunInput" and "client tool 'stall'" in err.message, err
    await _still_serves(served)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value, 1]
    return value


BRANCHES = {"anyOf": [{"items": {"$ref": "#/$defs/tree"}}, {"items": {"$ref": "#/$defs/tree"}}],
            "type": "array"}
"""Two branches at every level: each failing leaf is tried 2**depth ways (no regex at all)."""
REDOS_SCHEMAS = {
    "pattern": ({"type": "object", "properties": {"word": {"type": "string", "pattern": REDOS}}},
                {"word": ATTACK}, "does not match"),
    "patternProperties": ({"type": "object", "patternProperties": {REDOS: {}},
                           "additionalProperties": False}, {ATTACK: 1}, "does not match any of the regexes"),
    "anyOf": ({"type": "object", "$defs": {"tree": BRANCHES},
               "properties": {"tree": {"$ref": "#/$defs/tree"}}},
              {"tree": _nested(40)}, "too many steps"),
}


@pytest.mark.parametrize("keyword", sorted(REDOS_SCHEMAS))
async def test_a_backtracking_schema_is_a_prompt_validation_error(served: Served, keyword: str) -> None:
    schema, args, said = REDOS_SCHEMAS[keyword]
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("spell", args)]), task_queue=queue,
                             client_tools=[_tool("spell", schema)])
    result: RunResult = await _bounded(served, handle.result(), "the run's end")
    assert result.output.startswith("spell=validation_error:"), result.output[:300]
    assert said in result.output, result.output[:300]
    assert result.counters.tool_calls == 0  # nothing waited for the client
    await _still_serves(served)


async def test_a_backtracking_result_schema_refuses_the_result_promptly(served: Served) -> None:
    result_schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": REDOS}}}
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("ask", {})]), task_queue=queue,
                             client_tools=[_tool("ask", {"type": "object"}, result_schema)])
    call = await _waiting(served, handle)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await _bounded(served, tool_result(handle, call.call_id, {"v": ATTACK}, digest=call.digest),
                       "the refusal of a result")
    assert "does not match" in str(refused.value.cause), refused.value.cause
    await _bounded(served, tool_result(handle, call.call_id, {"v": "aaa"}, digest=call.digest),
                   "a good result")
    result: RunResult = await _bounded(served, handle.result(), "the run's end")
    assert result.output == "ask=succeeded:{'v': 'aaa'}"


async def test_a_pattern_re2_cannot_run_is_refused_naming_the_tool(served: Served) -> None:
    schema = {"type": "object", "properties": {"pw": {"type": "string", "pattern": r"(a)\1"}}}
    tclient, queue, _ = served
    handle = await start_run(tclient, front, steps_prompt([("login", {"pw": "aa"})]),
                             task_queue=queue, client_tools=[_tool("login", schema)])
    err = await _failure(served, handle)
    assert err.reason == "InvalidRunInput", err
    assert "client tool 'login'" in err.message and "RE2" in err.message, err


async def test_serve_sends_no_file_content_and_no_raw_error_to_the_web_client(
    target: str, namespace: str, tmp_path: Path
) -> None:
    secret = tmp_path / "credentials.json"
    secret.write_text(json.dumps(CREDENTIALS), encoding="utf-8")
    process = await readme_process("towline serve --agent examples.frontend:web_agent",
                                   env=cli_env(target, namespace))
    try:
        base = await _serving(process)
        tools = [{"name": "pick_color", "description": "Show the user a color picker",
                  "parameters": {"type": "object",
                                 "properties": {"prompt": {"$ref": secret.as_uri()}}}}]
        async with httpx.AsyncClient(base_url=base, timeout=WAIT) as http:
            events = await asyncio.wait_for(_sse(http, "/agents/frontend-web", {
                "threadId": f"i40-schema-{uuid4().hex[:8]}", "runId": "r1", "tools": tools,
                "messages": [{"id": "m1", "role": "user", "content": "Pick a color"}]}), WAIT)
        text = json.dumps(events)
        assert SECRET not in text and "service_account" not in text, text
        assert events[-1]["type"] == "RUN_ERROR", events
        message = events[-1]["message"]
        assert "client tool 'pick_color'" in message and "refers outside the schema" in message
        for raw in ("Traceback", "Unknown type", "for validator", "Unresolvable", "urlopen"):
            assert raw not in text, text
    finally:
        await _stop(process)  # it still stops on SIGTERM


async def test_an_internal_errors_raw_text_and_a_libraries_stay_off_the_wire() -> None:
    """The RUN_ERROR of a run that failed on a bug (`InternalError`, whose message is a raw
    exception's: it quoted the file read above) and of an exception the server did not expect
    say what kind of failure it was, not the raw text."""
    from towline.events import RunEvent
    from towline.serve.agui import TurnMapper
    from towline.serve.decide import failure_reason

    raw = f"UnknownType: Unknown type 'service_account' for validator with schema: {CREDENTIALS}"
    failed = RunEvent.model_validate({"type": "failed", "offset": 3, "reason": "InternalError",
                                      "message": raw})
    (error,) = TurnMapper("wf", "t", "r").map(failed)
    wire = error.model_dump_json(by_alias=True)
    assert SECRET not in wire and "UnknownType" not in wire, wire
    assert json.loads(wire)["code"] == "InternalError"
    told = failure_reason(OSError(f"cannot read {SECRET}"))
    assert SECRET not in told and "OSError" in told, told
    # the one home of what a client sees: an update's or an ended run's InternalError alike
    for failure in (WorkflowUpdateFailedError(ApplicationError(raw, type="InternalError")),
                    RunEnded("FAILED", "InternalError", raw)):
        told = failure_reason(failure)
        assert SECRET not in told and "UnknownType" not in told and "internal error" in told, told


async def test_an_mcp_servers_listed_schemas_neither_read_nor_freeze(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    """`tests/i40_schema_mcp.py` lists `peek` (a `$ref` to the credentials file) and `spell`
    (`^(a+)+$`): `peek` is left out (the model's call of it is refused as an unknown tool,
    nothing read), `spell`'s call is a prompt validation error, and `echo` still runs."""
    from i40_schema_mcp import agent

    secret = tmp_path / "credentials.json"
    secret.write_text(json.dumps(CREDENTIALS), encoding="utf-8")
    queue = f"i40-mcp-{uuid4().hex[:8]}"
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH,
                                            "I40_SECRET_FILE": str(secret)})
    proc = await towline_process("worker", "--agent", "i40_schema_mcp:agent", "--task-queue",
                                 queue, env=env)
    try:
        tclient = with_towline(client, [agent])
        prompt = steps_prompt([("attack_peek", {"path": "x"})], [("attack_spell", {"word": ATTACK})],
                              [("attack_echo", {"text": "still here"})])
        handle = await start_run(tclient, agent, prompt, task_queue=queue)
        result: RunResult = await _bounded((tclient, queue, proc), handle.result(), "the run's end")
        peeked, spelled, echoed = result.output.split("; ")
        assert peeked.startswith("attack_peek=") and "succeeded" not in peeked, peeked
        assert spelled.startswith("attack_spell=validation_error:") and "match" in spelled, spelled[:300]
        assert echoed == "attack_echo=succeeded:{'result': 'still here'}", echoed
        assert SECRET not in result.output
        assert SECRET.encode() not in await _history_bytes(handle)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
