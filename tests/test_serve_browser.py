"""The page of `towline serve` in a real headless Chromium (Playwright, the system browser).

The app runs in this process on a free port (`towline.serve.app`, uvicorn) with a worker
for `serve_agents.agent`, against the session's dev server. One conversation in one tab:
an answer streams in and the page is reloaded half-way (it shows what it had and picks the
stream up at the offset it kept, without repeating a word); then a tool call waits for
approval, and a click on Approve lets it run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import pytest_asyncio
import uvicorn
from machine_tools import chromium_path
from playwright.async_api import async_playwright, expect
from serve_agents import COUNT
from serve_agents import agent as web_agent
from temporalio.client import Client

from towline.devserver import free_port
from towline.serve.app import ServeConfig, create_app
from towline.testing import towline_worker

pytestmark = pytest.mark.timeout(120)

UI = "http://localhost:8233"


@pytest.fixture
def chromium() -> str:
    """The browser, found first: without one the test skips (fails under CI=true) before any
    server starts."""
    return chromium_path()


@pytest_asyncio.fixture
async def served(client: Client) -> AsyncIterator[tuple[str, Client]]:
    """The page's base URL, and the towline client of the worker behind it."""
    async with towline_worker(client, [web_agent]) as (tclient, queue):
        app = create_app(ServeConfig(client=tclient, agents=[web_agent], task_queue=queue, ui=UI))
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        serving = asyncio.ensure_future(server.serve())
        while not server.started:
            assert not serving.done()
            await asyncio.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}", tclient
        finally:
            app.close()
            server.should_exit = True
            await asyncio.wait_for(serving, 30)


async def test_the_page_streams_resumes_after_a_reload_and_decides_approvals(
    chromium: str, served: tuple[str, Client], namespace: str
) -> None:
    base, tclient = served
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium)
        try:
            page = await browser.new_page()
            requested: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            await page.goto(base + "/")
            await expect(page.locator("#agent")).to_have_value("serve-web")

            # an answer streams in: part of it shows before the rest has been written
            await page.fill("#message", "count to eight")
            await page.click("#send")
            answer = page.locator(".msg.assistant")
            await expect(answer).to_contain_text("one", timeout=30_000)
            partial = await answer.text_content() or ""
            assert partial.split() == COUNT[:len(partial.split())] and len(partial.split()) < len(COUNT)

            # reload half-way: the page shows what it had and resumes at the offset it kept
            await page.reload()
            await expect(page.locator(".msg.user")).to_have_text(["count to eight"])
            await expect(page.locator("body")).to_have_attribute("data-state", "idle", timeout=30_000)
            await expect(answer).to_have_text(" ".join(COUNT))  # every word once
            resumed = [parse_qs(urlsplit(u).query) for u in requested if "/events?" in u]
            assert resumed and int(resumed[0]["from"][0]) > 0
            thread: str = await page.evaluate(
                "JSON.parse(sessionStorage.getItem('towline-serve')).thread")
            assert urlsplit(requested[-1]).path == f"/runs/{thread}/events"

            # a call waits for approval; a click lets it run
            await page.fill("#message", "launch rocket")
            await page.click("#send")
            card = page.locator(".tool")
            await expect(card.locator(".call")).to_have_text('launch({"target":"rocket"})',
                                                               timeout=30_000)
            await expect(card.locator(".status")).to_have_text("waiting for approval")
            await expect(page.locator("#status")).to_have_text("The run waits for your approval.")
            await card.locator("button.approve").click()
            await expect(card.locator(".status")).to_have_text("succeeded", timeout=30_000)
            await expect(card.locator(".result")).to_have_text("rocket is in orbit")
            await expect(card.locator("button")).to_have_count(0)
            await expect(answer.last).to_have_text("Launched: rocket is in orbit", timeout=30_000)
            await expect(page.locator("body")).to_have_attribute("data-state", "idle")

            # another launch, rejected with a reason: the model is told, and says so
            await page.fill("#message", "launch moon")
            await page.click("#send")
            second = card.nth(1)
            await expect(second.locator(".status")).to_have_text("waiting for approval",
                                                                 timeout=30_000)
            await second.locator("input.reason").fill("not today")
            await second.locator("button.reject").click()
            await expect(second.locator(".status")).to_have_text("denied", timeout=30_000)
            await expect(second.locator(".result")).to_contain_text("not today")
            await expect(answer.last).to_have_text("Not launched (denied).", timeout=30_000)

            # the run's page in the Temporal UI
            link = page.locator("#ui-link")
            await expect(link).to_be_visible()
            assert await link.get_attribute("href") == f"{UI}/namespaces/{namespace}/workflows/{thread}"
        finally:
            await browser.close()

    # every message went to one durable run: the thread's session, waiting for the next
    state: dict[str, Any] = await tclient.get_workflow_handle(thread).query("state")
    assert state["status"] == "waiting" and state["counters"]["run_step"] == 5
