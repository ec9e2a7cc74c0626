"""`examples/research.py` on its offline model: real fetches from a local web server, a real
file read that waits for approval, and a rejection the model is told about."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from examples.research import agent, page_text
from scripts import returns
from towline.client import start_run
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision

PAGE = b"""<html><head><title>Otters</title><style>p {color: red}</style></head>
<body><h1>Sea otters</h1><p>Sea otters hold hands while they sleep.</p></body></html>"""


@pytest.fixture
def site() -> Iterator[str]:
    """A web page on 127.0.0.1 (a free port)."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 200 if self.path == "/otters" else 404
            self.send_response(status)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _pending(handle: WorkflowHandle[Any, Any]) -> str:
    """The call id of the first tool call waiting for approval."""
    async with asyncio.timeout(30):
        while True:
            state: dict[str, Any] = await handle.query("state")
            if state.get("pending_approvals"):
                return next(iter(state["pending_approvals"]))
            await asyncio.sleep(0.1)


def test_page_text_drops_markup() -> None:
    assert page_text(PAGE.decode()) == "Otters Sea otters Sea otters hold hands while they sleep."


async def test_fetch_and_approved_read(client: Client, site: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("Otters use stones as tools.\n")
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, f"Compare {site}/otters with {notes}", task_queue=queue)
        call_id = await _pending(handle)
        assert call_id == "read_0"
        await handle.execute_update("approve", ApprovalDecision(call_id=call_id))
        result = await handle.result()

    assert [(r.tool_name, r.status) for r in returns(result.messages)] == [
        ("fetch_url", "succeeded"), ("read_file", "succeeded")]
    assert "Sea otters hold hands" in result.output
    assert "Otters use stones as tools." in result.output


async def test_a_rejected_read_is_reported(client: Client, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do not share")
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, f"What is in {secret}?", task_queue=queue)
        call_id = await _pending(handle)
        await handle.execute_update("reject", ApprovalDecision(call_id=call_id, reason="private"))
        result = await handle.result()
    assert [(r.tool_name, r.status) for r in returns(result.messages)] == [("read_file", "denied")]
    assert "do not share" not in result.output
    assert "read_file: denied" in result.output


async def test_a_failed_fetch_is_a_failed_return(client: Client, site: str) -> None:
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, f"Read {site}/missing please", task_queue=queue)
        result = await handle.result()
    assert [(r.tool_name, r.status) for r in returns(result.messages)] == [("fetch_url", "failed")]
    assert "HTTP 404" in result.output
