"""`examples/sse.py`, the README's web backend: a real uvicorn server streams a run's events as
server-sent events to an HTTP client, and a client that reconnects with `Last-Event-ID` gets
the rest, without a duplicate or a gap."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from ports import free_port
from streaming_agents import slow_writer
from temporalio.client import Client

from towline.client import start_run
from towline.testing import towline_worker


@pytest.fixture
async def backend(target: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """examples/sse.py served by uvicorn on 127.0.0.1 (a free port), pointed at the test server."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", target)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", namespace)
    from examples.sse import app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.ensure_future(server.serve())
    async with asyncio.timeout(30):
        while not server.started:
            await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)


async def read_sse(response: httpx.Response, stop_after: int | None = None) -> list[dict[str, Any]]:
    """The SSE events of a streamed response: id, event and data of each."""
    found: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if not line:
            if current:
                found.append(current)
                current = {}
                if stop_after is not None and len(found) >= stop_after:
                    break
            continue
        name, _, value = line.partition(": ")
        current[name] = json.loads(value) if name == "data" else value
    return found


async def test_the_backend_streams_events_and_resumes_after_last_event_id(
    client: Client, backend: str
) -> None:
    agent = slow_writer("sse-writer")
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "write", task_queue=queue, id=f"sse-{queue}")
        url = f"{backend}/runs/{handle.id}/events"
        async with httpx.AsyncClient(timeout=60) as http:
            async with http.stream("GET", url) as response:  # a browser that drops mid-run
                assert response.headers["content-type"].startswith("text/event-stream")
                first = await read_sse(response, stop_after=4)
            last = int(first[-1]["id"])
            async with http.stream("GET", url, headers={"Last-Event-ID": str(last)}) as response:
                rest = await read_sse(response)
            async with http.stream("GET", url) as response:
                whole = await read_sse(response)
        await handle.result()

    assert [e["id"] for e in first + rest] == [str(i) for i in range(len(whole))]
    assert first + rest == whole
    assert [e["event"] for e in whole][:2] == ["run", "step"]
    assert whole[-1]["event"] == "result" and whole[-1]["data"]["output"] == "one two three four five six"
    assert all(e["data"]["offset"] == int(e["id"]) and e["data"]["type"] == e["event"] for e in whole)
    assert sum(e["event"] == "text" for e in whole) >= 2
