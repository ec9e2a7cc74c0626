"""`towline serve` answers only for its own agents' threads, and only to its own pages.

A run of an agent the server does not serve is 404 for its events and its approvals (it
streamed any run's prompt and tool arguments, and approved any run's calls); a page on
another port of localhost is refused (the Origin check compared the host name only), a POST
that is not `application/json` is refused (a `text/plain` form post needs no preflight); a
lone-surrogate `threadId` and `from=²` are refused up front (one aborted the stream, the other
passed `isdigit()`). The application is driven in-process over ASGI, against runs on the dev
server (no worker needed: nothing here may reach one).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest_asyncio
from temporalio.client import Client

from towline import Agent
from towline.client import start_run, with_towline
from towline.models import TestModel
from towline.serve.app import ServeConfig, create_app

MODEL = TestModel(custom_output_text="hi")
served = Agent(name="audit-served", model=MODEL)
foreign = Agent(name="audit-foreign", model=MODEL)
ORIGIN = "http://localhost:8765"
SAME = {"Host": "localhost:8765", "Origin": ORIGIN}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def setup(client: Client) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """The app, and the id of a live run of an agent it does not serve."""
    tclient = with_towline(client, [served, foreign])
    queue = f"nobody-{uuid.uuid4().hex[:8]}"  # no worker: the run stays live, untouched
    handle = await start_run(tclient, foreign, "my secret prompt", task_queue=queue,
                             session=True)
    app = create_app(ServeConfig(client=tclient, agents=[served], task_queue=queue))
    transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN, timeout=20) as http:
        try:
            yield http, handle.id
        finally:
            await handle.terminate("test over")


async def test_another_agents_run_is_not_found(setup: tuple[httpx.AsyncClient, str]) -> None:
    http, run_id = setup
    events = await http.get(f"/runs/{run_id}/events", headers=SAME)
    assert events.status_code == 404, events.text
    assert "secret" not in events.text
    decided = await http.post(f"/runs/{run_id}/approvals/c1", headers=SAME,
                              json={"approved": True})
    assert decided.status_code == 404, decided.text


async def test_a_page_on_another_port_or_scheme_is_refused(
    setup: tuple[httpx.AsyncClient, str],
) -> None:
    http, run_id = setup
    for origin in ("http://localhost:9999", "https://localhost:8765", "http://127.0.0.1:8765"):
        refused = await http.post(f"/runs/{run_id}/approvals/c1", json={"approved": True},
                                  headers={"Host": "localhost:8765", "Origin": origin})
        assert refused.status_code == 403, (origin, refused.text)


async def test_a_post_that_is_not_json_is_refused(setup: tuple[httpx.AsyncClient, str]) -> None:
    http, run_id = setup
    body = '{"threadId": "t1", "runId": "r1", "messages": []}'
    for headers in ({"Content-Type": "text/plain"}, {}):
        plain = await http.post("/agents/audit-served", content=body,
                                headers={**SAME, **headers})
        assert plain.status_code == 415, plain.text
    plain = await http.post(f"/runs/{run_id}/approvals/c1", content='{"approved": true}',
                            headers={**SAME, "Content-Type": "text/plain;charset=UTF-8"})
    assert plain.status_code == 415, plain.text


async def test_a_lone_surrogate_thread_and_a_superscript_offset_are_refused(
    setup: tuple[httpx.AsyncClient, str],
) -> None:
    http, run_id = setup
    body = ('{"threadId": "t\\ud800", "runId": "r1", "state": {}, "messages": [{"id": "m1", '
            '"role": "user", "content": "hi"}], "tools": [], "context": [], "forwardedProps": {}}')
    turn = await http.post("/agents/audit-served", content=body,
                           headers={**SAME, "Content-Type": "application/json"})
    assert turn.status_code == 422, turn.text
    assert "threadId" in turn.text
    offset = await http.get(f"/runs/{run_id}/events", params={"from": "²"}, headers=SAME)
    assert offset.status_code == 422, offset.text


async def test_a_decision_that_is_none_is_refused_before_the_run_is_asked(
    setup: tuple[httpx.AsyncClient, str],
) -> None:
    http, run_id = setup
    for body, said in [({"decision": "edit"}, 'an edit needs "args"'),
                       ({"decision": "respond"}, 'a respond needs "result"'),
                       ({"decision": "approve", "approved": True}, 'give "decision"'),
                       ({}, 'give "decision"'), ({"decision": "maybe"}, "decision"),
                       ({"decision": "approve", "extra": 1}, "extra")]:
        refused = await http.post(f"/runs/{run_id}/approvals/c1", headers=SAME, json=body)
        assert refused.status_code == 422 and said in refused.json()["error"], (body, refused.text)
    # a respond with a null return is a return: it goes on to the run (not this server's: 404)
    nulled = await http.post(f"/runs/{run_id}/approvals/c1", headers=SAME,
                             json={"decision": "respond", "result": None})
    assert nulled.status_code == 404, nulled.text
    # an AG-UI resume for a thread with no live run is told so in the stream
    body = {"threadId": f"gone-{uuid.uuid4().hex[:6]}", "runId": "r", "messages": [],
            "resume": [{"interruptId": "c1@d", "status": "resolved", "payload": {"decision": "approve"}}]}
    async with http.stream("POST", "/agents/audit-served", headers=SAME, json=body) as response:
        text = (await response.aread()).decode()
    assert '"type":"RUN_ERROR"' in text and "has no live run to take these answers" in text
