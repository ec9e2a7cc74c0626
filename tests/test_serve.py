"""`towline serve`: the AG-UI endpoint over HTTP, driven by an SSE client (httpx).

The docs' two commands (docs/fleet.md) run as subprocesses exactly as written, against the
session's dev server (`TEMPORAL_ADDRESS`) with their own in-process worker: one carries a
research conversation through a dropped connection, an approval and a second message on
the same thread; the other (with `--auth`) shows who is refused. The event mapping itself
is unit-tested on hand-made run events.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast
from uuid import uuid4

import httpx
import pytest
import pytest_asyncio
from readme import cli_env, read_until, readme_process, stop_process
from temporalio.client import Client, WorkflowExecutionStatus

from towline.events import RunEvent
from towline.runtime.plugin import TowlinePlugin
from towline.serve.agui import TurnMapper, history, sse, user_text
from towline.serve.app import ServeConfig

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent

Event = dict[str, Any]


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


# --- the mapping, on hand-made events ------------------------------------------------------


def _ev(offset: int, type: str, **fields: Any) -> RunEvent:
    return RunEvent.model_validate({"type": type, "offset": offset, **fields})


def _wire(events: list[Any]) -> list[Event]:
    """AG-UI events as they go on the wire (camelCase JSON)."""
    return [json.loads(e.model_dump_json(by_alias=True)) for e in events]


def _types(events: list[Any]) -> list[str]:
    return [e["type"] for e in _wire(events)]


def test_a_streamed_turn_maps_to_agui_events() -> None:
    m = TurnMapper("wf", "thread", "run-1", streaming=True)
    assert _types(m.map(_ev(0, "run", agent="a", prompt="hi"))) == ["CUSTOM"]
    assert _types(m.map(_ev(1, "step", step=1))) == ["STEP_STARTED"]
    first = m.map(_ev(2, "text", step=1, delta="Hel", attempt=1))
    assert _types(first) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert _types(m.map(_ev(3, "text", step=1, delta="lo", attempt=1))) == ["TEXT_MESSAGE_CONTENT"]
    done = _wire(m.map(_ev(4, "response", step=1, text="Hello",
                           tool_calls=[{"call_id": "c1", "tool": "add", "args": {"a": 1}}])))
    # the streamed text is closed, not repeated; the call belongs to the text's message
    assert [e["type"] for e in done] == ["TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS",
                                         "TOOL_CALL_END", "STEP_FINISHED"]
    assert done[1] == {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "add",
                       "parentMessageId": "wf:1"}
    assert json.loads(done[2]["delta"]) == {"a": 1}
    (result,) = _wire(m.map(_ev(5, "tool_end", step=1, call_id="c1", tool="add",
                                status="succeeded", content=2)))
    assert (result["toolCallId"], result["content"], result["metadata"]["towline"]["status"]) == (
        "c1", "2", "succeeded")
    (approval,) = _wire(m.map(_ev(6, "approval", step=1, call_id="c2", tool="launch", args={})))
    assert (approval["name"], approval["value"]["call_id"]) == ("towline.approval", "c2")
    assert not m.finished
    (finished,) = _wire(m.map(_ev(7, "answer", output="Hello")))
    assert finished == {"type": "RUN_FINISHED", "threadId": "thread", "runId": "run-1",
                        "result": "Hello"}
    assert m.finished
    # on the wire: only the last event of a run event carries its offset
    wire = sse(first, 2)
    assert wire.count("data: ") == 2 and wire.count("id: ") == 1
    assert wire.split("\n\n")[1].startswith("id: 2\ndata: ")


def test_a_resumed_or_unstreamed_response_and_a_sent_message() -> None:
    # joined after the step started, in a run that streams: its text went out before
    joined = TurnMapper("wf", "t", "r", streaming=True)
    assert _types(joined.map(_ev(9, "response", step=3, text="late"))) == ["STEP_FINISHED"]
    # a run that does not stream: the whole text, as one message
    whole = TurnMapper("wf", "t", "r", streaming=False)
    out = _wire(whole.map(_ev(9, "response", step=3, text="all of it", thinking="hmm")))
    assert [e["type"] for e in out] == [
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END", "STEP_FINISHED"]
    assert (out[2]["delta"], out[6]["delta"]) == ("hmm", "all of it")
    # a message sent to a busy session: an earlier answer does not end its turn
    sent = TurnMapper("wf", "t", "r", awaiting_user=True)
    assert _types(sent.map(_ev(3, "answer", output="old"))) == ["CUSTOM"]
    assert _types(sent.map(_ev(4, "user", content="new"))) == ["CUSTOM"]
    (error,) = _wire(sent.map(_ev(5, "failed", reason="MaxStepsExceeded", message="too many")))
    assert error == {"type": "RUN_ERROR", "code": "MaxStepsExceeded", "message": "too many"}
    # the input: the last message is the user's; earlier text becomes the history
    from ag_ui.core import AssistantMessage, UserMessage

    messages = [UserMessage(id="1", content="a"), AssistantMessage(id="2", content="b"),
                UserMessage(id="3", content="c")]
    assert user_text(messages) == "c"
    assert [m.kind for m in history(messages)] == ["request", "response"]
    with pytest.raises(ValueError, match="last message must be the user's"):
        user_text(messages[:2])
    image = UserMessage.model_validate({"id": "4", "role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image", "source": {"type": "url", "value": "u"}}]})
    with pytest.raises(ValueError, match="only text messages are supported"):
        user_text([image])


# --- the HTTP API of the docs' commands ----------------------------------------------------


async def _serving(process: asyncio.subprocess.Process) -> str:
    """The base URL `towline serve` says it listens on, once it answers there."""
    said = await read_until(process.stderr, "towline serve:")
    found = re.search(r"at http://localhost:(\d+)/", said)
    assert found, said
    base = f"http://127.0.0.1:{found.group(1)}"
    async with httpx.AsyncClient(base_url=base) as http:
        for _ in range(200):
            try:
                if (await http.get("/")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    return base


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    stop_process(process, signal.SIGTERM)
    # read while it stops: a server that still logs would otherwise block on a full pipe
    try:
        _, err = await asyncio.wait_for(process.communicate(), 30)
    except TimeoutError:  # never left running past its test
        stop_process(process, signal.SIGKILL)
        await process.wait()
        raise
    rest = err.decode(errors="replace")
    assert process.returncode == 0, rest
    assert "Traceback" not in rest and rest.rstrip().endswith("stopped"), rest


async def _events(response: httpx.Response) -> AsyncIterator[tuple[int | None, Event]]:
    """(SSE id, AG-UI event) pairs of a streamed response."""
    assert response.status_code == 200, await response.aread()
    assert response.headers["content-type"].startswith("text/event-stream")
    ident: int | None = None
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("data: "):
            yield ident, json.loads(line[6:])
            ident = None


def _turn(thread: str, run: str, *texts: str) -> Event:
    return {"threadId": thread, "runId": run,
            "messages": [{"id": f"m{i}", "role": "user", "content": t} for i, t in enumerate(texts)]}


def _documented_answer() -> list[tuple[int | None, Event]]:
    """The (SSE id, event) pairs of the answer docs/fleet.md shows."""
    page = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8")
    block = page.split("its answer up to the approval it waits for")[1].split("```text\n")[1]
    pairs: list[tuple[int | None, Event]] = []
    ident: int | None = None
    for line in block.split("```")[0].splitlines():
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("data: "):
            pairs.append((ident, json.loads(line[6:])))
            ident = None
    return pairs


DOC_DIGEST = "63dfb3d6072bdc56"
"""The call digest the docs show (a real one: each run's differs, it names the execution)."""
DOC_EXPIRES = "2026-12-02T14:00:00+00:00"
"""When the docs' approval times out (an hour after it was asked)."""


def _as_documented(event: Event, thread: str, digest: str) -> Event:
    """`event` as the docs show it: their thread id and call digest, and a dev server's UI on
    port 8233."""
    text = json.dumps(event).replace(thread, "research-web-1").replace(digest, DOC_DIGEST)
    text = re.sub(r'"expiresAt": "[^"]+"', f'"expiresAt": "{DOC_EXPIRES}"', text)
    return json.loads(re.sub(r"http://localhost:\d+/namespaces/[^/]+/",
                             "http://localhost:8233/namespaces/default/", text))


def _text(events: list[Event]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_a_conversation_survives_a_dropped_connection_and_an_approval(
    target: str, namespace: str, tclient: Client
) -> None:
    process = await readme_process("towline serve --agent examples.research:agent",
                                   env=cli_env(target, namespace))
    base = await _serving(process)
    thread = f"research-web-{uuid4().hex[:8]}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            page = await http.get("/")
            assert page.status_code == 200 and "<title>towline</title>" in page.text
            assert (await http.get("/info")).json()["agents"] == ["research"]
            # turn 1: the stream ends where the run waits for approval (AG-UI's interrupt)
            async with http.stream("POST", "/agents/research",
                                   json=_turn(thread, "run-1", "Summarise README.md")) as response:
                seen = [(i, e) async for i, e in _events(response)]
            handle = tclient.get_workflow_handle(thread)
            state: dict[str, Any] = await handle.query("state")
            (waiting,) = state["pending_approvals"].values()
            digest = waiting["digest"]
            assert re.fullmatch(r"[0-9a-f]{16}", digest)
            assert [(i, _as_documented(e, thread, digest)) for i, e in seen] == _documented_answer()
            finished = seen.pop()  # made from no run event: it carries no id
            assert finished[0] is None and finished[1]["type"] == "RUN_FINISHED"
            (interrupt,) = finished[1]["outcome"]["interrupts"]
            assert finished[1]["outcome"]["type"] == "interrupt"
            assert interrupt["id"] == f"read_0@{digest}" and interrupt["toolCallId"] == "read_0"
            assert interrupt["metadata"]["towline"]["decisions"] == waiting["decisions"] == [
                "approve", "reject", "edit", "respond"]
            first = [e for _, e in seen]
            started = first[0]
            assert started["type"] == "RUN_STARTED" and seen[0][0] == -1
            assert started["metadata"]["towline"]["workflowId"] == thread
            assert started["metadata"]["towline"]["from"] == 0
            assert started["metadata"]["towline"]["runUrl"].endswith(f"/workflows/{thread}")
            assert _text(first) == "Let me look."
            call = next(e for e in first if e["type"] == "TOOL_CALL_START")
            assert call["toolCallName"] == "read_file"
            args = next(e for e in first if e["type"] == "TOOL_CALL_ARGS")
            assert json.loads(args["delta"]) == {"path": "README.md"}
            approval = first[-1]["value"]
            call_id = approval["call_id"]
            assert call_id == call["toolCallId"] and approval["tool"] == "read_file"
            # what a decision names: the call's digest and index, and what may be decided
            assert (approval["digest"], approval["index"], approval["decisions"]) == (
                digest, waiting["index"], waiting["decisions"])
            last = seen[-1][0]
            assert last is not None

            # nobody listens; a wrong call id or digest is refused, the right call approved
            refused = await http.post(f"/runs/{thread}/approvals/nope", json={"approved": True})
            assert refused.status_code == 409
            assert "no tool call 'nope' is waiting for a decision" in refused.json()["error"]
            stale = await http.post(f"/runs/{thread}/approvals/{call_id}",
                                    json={"decision": "approve", "digest": "0" * 16})
            assert stale.status_code == 409 and "is not the call you decided" in stale.json()["error"]
            ok = await http.post(f"/runs/{thread}/approvals/{call_id}",
                                 json={"decision": "approve", "digest": digest})
            assert ok.json() == {"workflowId": thread, "callId": call_id, "decision": "approved"}

            # reconnect: the rest of the turn, from the offset after the last one seen
            async with http.stream("GET", f"/runs/{thread}/events",
                                   params={"from": last + 1, "run_id": "run-1"}) as response:
                rest = [(i, e) async for i, e in _events(response)]
            events = [e for _, e in rest]
            decision = next(e for e in events if e.get("name") == "towline.decision")
            assert decision["value"]["decision"] == "approved"
            result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
            assert result["toolCallId"] == call_id
            assert result["metadata"]["towline"]["status"] == "succeeded"
            assert result["content"].startswith("# towline")
            assert _text(events).startswith("Here is what I found:\n- read_file: ")
            assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["runId"] == "run-1"
            assert events[-1]["result"] == _text(events)

            # nothing lost, nothing repeated: the two connections' ids are the run's offsets
            ids = [i for i, _ in seen + rest if i is not None and i >= 0]
            assert ids == list(range(ids[-1] + 1))
            async with http.stream("GET", f"/runs/{thread}/events",
                                   params={"run_id": "run-1"}) as response:
                again = [e async for _, e in _events(response)]
            assert again == first[1:] + events  # the same turn read from its start

            # turn 2 on the same thread: a message to the same durable run
            async with http.stream("POST", "/agents/research", json=_turn(
                    thread, "run-2", "Summarise README.md", "Thanks! And now?")) as response:
                pairs = [(i, e) async for i, e in _events(response)]
            second = [e for _, e in pairs]
            after = max(i for i, _ in pairs if i is not None) + 1
            assert second[0]["metadata"]["towline"]["from"] == ids[-1] + 1
            assert second[1]["name"] == "towline.user"
            assert second[1]["value"]["content"] == "Thanks! And now?"
            assert _text(second).startswith("Give me a URL or a file path")
            assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["runId"] == "run-2"

            bad = await http.post("/agents/research", json={"threadId": thread, "runId": "r"})
            assert bad.status_code == 422 and "messages" in bad.json()["error"]
            assert (await http.post("/agents/nope", json=_turn(thread, "r", "hi"))).status_code == 404
            # one run for the whole thread: a session, waiting for the next message
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
            state = await handle.query("state")
            assert state["status"] == "waiting" and state["counters"]["run_step"] == 3

            # a thread whose run has ended: a new run, with the thread's messages as history
            await handle.signal("end")
            await handle.result()
            async with http.stream("POST", "/agents/research", json=_turn(
                    thread, "run-3", "Summarise README.md", "Thanks! And now?", "Hello again")) as response:
                pairs = [(i, e) async for i, e in _events(response)]
            third = [e for _, e in pairs]
            after = max(i for i, _ in pairs if i is not None) + 1
            assert third[0]["metadata"]["towline"]["from"] == 0 and third[-1]["runId"] == "run-3"
            assert _text(third).startswith("Give me a URL or a file path")
            raw: list[dict[str, Any]] = await handle.query("messages")
            said = [p["content"] for m in raw for p in m["parts"] if p.get("part_kind") == "user"]
            assert said == ["Summarise README.md", "Thanks! And now?", "Hello again"]

            # a page follows the session waiting for its next message when the server stops:
            # its stream ends (to be resumed later) and the server stops at once, quietly
            async def follow() -> list[Event]:
                async with http.stream("GET", f"/runs/{thread}/events",
                                       params={"from": after}) as response:
                    return [e async for _, e in _events(response)]

            reader = asyncio.ensure_future(follow())
            await asyncio.sleep(0.5)
            assert not reader.done()
            stopping = asyncio.get_running_loop().time()
            await _stop(process)
            assert asyncio.get_running_loop().time() - stopping < 10  # and no traceback (_stop)
            assert await reader == []
    finally:
        await _stop(process)


async def test_serve_with_a_token_refuses_strangers(target: str, namespace: str) -> None:
    token = f"tok-{uuid4().hex}"
    process = await readme_process(
        'towline serve --agent examples.research:agent --auth "$SERVE_TOKEN"',
        env=cli_env(target, namespace, {"SERVE_TOKEN": token}))
    base = await _serving(process)
    port = base.rsplit(":", 1)[1]
    good = {"Authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.get("/")).status_code == 200  # the page holds no data
            assert (await http.get("/favicon.ico")).status_code == 204  # nor its icon
            assert (await http.get("/info")).status_code == 401
            assert (await http.get("/info", headers={"Authorization": f"Bearer {token}x"})).status_code == 401
            assert (await http.get("/info", headers=good)).json()["agents"] == ["research"]
            assert (await http.post("/agents/research", json=_turn("t", "r", "hi"))).status_code == 401
            assert (await http.get("/runs/t/events")).status_code == 401
            assert (await http.post("/runs/t/approvals/c", json={"approved": True})).status_code == 401
            # a page reaching it by another name (DNS rebinding), or another site's page
            rebound = {**good, "Host": f"rebind.example:{port}"}
            assert (await http.get("/", headers=rebound)).status_code == 421
            assert (await http.get("/info", headers=rebound)).status_code == 421
            foreign = {**good, "Origin": "http://evil.example"}
            assert (await http.post("/agents/research", headers=foreign,
                                    json=_turn("t", "r", "hi"))).status_code == 403
            assert (await http.get("/info", headers={**good, "Origin": base})).status_code == 200
    finally:
        await _stop(process)


async def test_two_serves_started_at_once_each_answer_on_the_port_they_announce(
    target: str, namespace: str,
) -> None:
    """Both want the default port: one gets it, the other says it took a free one, and each URL
    reaches the process that announced it (each refuses the other's token)."""
    tokens = [f"tok-{uuid4().hex}" for _ in range(2)]
    processes = await asyncio.gather(*(readme_process(
        'towline serve --agent examples.research:agent --auth "$SERVE_TOKEN"',
        env=cli_env(target, namespace, {"SERVE_TOKEN": token})) for token in tokens))
    try:
        bases = await asyncio.gather(*(_serving(p) for p in processes))
        assert bases[0] != bases[1], bases
        async with httpx.AsyncClient(timeout=30) as http:
            for base, token, other in zip(bases, tokens, reversed(tokens), strict=True):
                mine = await http.get(f"{base}/info", headers={"Authorization": f"Bearer {token}"})
                assert mine.status_code == 200, (base, mine.text)
                theirs = await http.get(f"{base}/info", headers={"Authorization": f"Bearer {other}"})
                assert theirs.status_code == 401, base
    finally:
        await asyncio.gather(*(_stop(p) for p in processes))


def test_the_token_and_the_config_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from towline.cli.common import CliError
    from towline.cli.serve import AUTH_ENV, _auth_token  # pyright: ignore[reportPrivateUsage]

    with pytest.raises(CliError, match="--auth takes a token without spaces") as caught:
        _auth_token("two words")
    assert caught.value.code == 2
    assert _auth_token(None) is None
    monkeypatch.setenv(AUTH_ENV, " from-the-env ")
    assert _auth_token(None) == "from-the-env" and _auth_token("given") == "given"
    with pytest.raises(ValueError, match="at least one agent"):
        ServeConfig(client=cast(Any, None), agents=[])
