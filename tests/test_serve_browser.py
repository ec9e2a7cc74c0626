"""The page of `towline serve` in a real headless Chromium (Playwright, the system browser).

The app runs in this process on a free port (`towline.serve.app`, uvicorn) with a worker
for `serve_agents.agent`, against the session's dev server. One conversation in one tab:
an answer streams in and the page is reloaded half-way (it shows what it had and picks the
stream up at the offset it kept, without repeating a word); then a tool call waits for
approval, and a click on Approve lets it run. In another: Edit, Respond and the page's own
front-end tool, taking the screenshots the docs show (`TOWLINE_SCREENSHOTS=docs` writes them
into docs/images).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import pytest_asyncio
import uvicorn
from machine_tools import chromium_path
from playwright.async_api import async_playwright, expect
from ports import free_port
from serve_agents import COUNT
from serve_agents import agent as web_agent
from temporalio.client import Client

from towline.serve.app import ServeConfig, create_app
from towline.testing import towline_worker

pytestmark = pytest.mark.timeout(120)

UI = "http://localhost:8233"
IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
"""Where the docs' screenshots of the page are (the second test takes them)."""
WRITE_DOCS = "TOWLINE_SCREENSHOTS"
"""With `TOWLINE_SCREENSHOTS=docs` the second test writes its screenshots into `IMAGES`
(to refresh the docs' pictures); otherwise into its temporary folder, checked against them
(a browser's anti-aliasing differs by a pixel from run to run: a test run leaves the
committed pictures alone)."""


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


async def test_the_page_edits_and_answers_calls_and_runs_a_front_end_tool(
    chromium: str, served: tuple[str, Client], tmp_path: Path
) -> None:
    """Edit (the call runs with the reviewer's arguments), respond (its return, and the tool does
    not run), and the page's own front-end tool; the screenshots of docs/human-in-the-loop.md
    and docs/client-tools.md are taken on the way."""
    base, tclient = served
    shots = IMAGES if os.environ.get(WRITE_DOCS) == "docs" else tmp_path
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium)
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 560},
                                          device_scale_factor=1)
            answered: list[tuple[str, int]] = []
            page.on("response", lambda r: answered.append((urlsplit(r.url).path, r.status)))
            await page.goto(base + "/")
            await expect(page.locator("#agent")).to_have_value("serve-web")
            # a thread id of its own (the session's dev server is new): the same screenshots
            await page.evaluate("""() => {
                const s = JSON.parse(sessionStorage.getItem('towline-serve'));
                s.thread = 'serve-web-docs';
                sessionStorage.setItem('towline-serve', JSON.stringify(s)); }""")
            await page.reload()
            await expect(page.locator("#thread")).to_have_text("thread serve-web-docs")
            answer = page.locator(".msg.assistant")
            cards = page.locator(".tool")

            # edit: the arguments change, the call runs with them, both are shown
            await page.fill("#message", "launch rocket")
            await page.click("#send")
            card = cards.nth(0)
            await expect(card.locator(".status")).to_have_text("waiting for approval", timeout=30_000)
            await expect(card.locator(".decide button")).to_have_text(
                ["Approve", "Reject", "Edit", "Respond"])
            await card.locator("button.edit").click()
            area = card.locator("textarea.edit-args")
            await expect(area).to_have_value('{"target":"rocket"}')
            await area.fill('{"target": "satellite"}')
            await card.locator("input.reason").fill("the rocket is booked")
            await _shoot(page, shots / "serve-edit.png")
            await card.locator("button.confirm").click()
            await expect(card.locator(".status")).to_have_text("succeeded", timeout=30_000)
            await expect(card.locator(".call")).to_have_text('launch({"target":"satellite"})')
            await expect(card.locator(".edited")).to_have_text('edited from {"target":"rocket"}')
            await expect(card.locator(".result")).to_have_text("satellite is in orbit")
            await expect(answer.last).to_have_text("Launched: satellite is in orbit", timeout=30_000)

            # an edit the tool's schema refuses is refused by the run: the call still waits;
            # then respond: the reviewer's answer is its return, and the tool does not run
            await page.fill("#message", "launch probe")
            await page.click("#send")
            card = cards.nth(1)
            await expect(card.locator(".status")).to_have_text("waiting for approval", timeout=30_000)
            await card.locator("button.edit").click()
            await card.locator("textarea.edit-args").fill('{"target": 5}')
            await card.locator("button.confirm").click()
            await expect(card.locator(".note")).to_contain_text("edit refused: the edited arguments")
            await expect(card.locator(".status")).to_have_text("waiting for approval")
            await card.locator("button.respond").click()
            await card.locator("textarea.respond-result").fill("probe is already up")
            await _shoot(page, shots / "serve-respond.png")
            await card.locator("button.confirm").click()
            await expect(card.locator(".result")).to_have_text("probe is already up", timeout=30_000)
            await expect(answer.last).to_have_text("Launched: probe is already up", timeout=30_000)

            # the page's front-end tool: the run's call ends the AG-UI run, the page asks the
            # person, and their answer goes back as a tool message
            await page.fill("#message", "ask Which colour should the rocket be?")
            await page.click("#send")
            card = cards.nth(2)
            asked = card.locator(".asked")
            await expect(asked.locator(".question")).to_have_text(
                "Which colour should the rocket be?", timeout=30_000)
            await expect(card.locator(".status")).to_have_text("waiting for your answer")
            await expect(page.locator("#status")).to_have_text("The agent asks you something.")
            await page.reload()  # the question is still asked (the page kept the turn)
            await expect(asked.locator(".question")).to_have_text(
                "Which colour should the rocket be?")
            await expect(page.locator("#status")).to_have_text("The agent asks you something.")
            await asked.locator("input.answer").fill("teal")
            await _shoot(page, shots / "serve-front-end-tool.png")
            await asked.locator("button.answer").click()
            await expect(answer.last).to_have_text("You answered: teal", timeout=30_000)
            await expect(card.locator(".result")).to_have_text("teal")
            await expect(card.locator(".status")).to_have_text("succeeded")
            await expect(page.locator("body")).to_have_attribute("data-state", "idle")
            thread: str = await page.evaluate(
                "JSON.parse(sessionStorage.getItem('towline-serve')).thread")
        finally:
            await browser.close()

    # nothing refused but the bad edit (the favicon neither: the page carries its own)
    assert [s for _, s in answered if s >= 400] == [409], answered
    # what the run recorded: the edit (both argument sets), the answer, the client's result
    state: dict[str, Any] = await tclient.get_workflow_handle(thread).query("state")
    trail = {e["decision"]: e for e in state["decisions"] if e.get("source") in ("person", "client")}
    assert trail["edited"]["args"] == {"target": "satellite"}
    assert trail["edited"]["original_args"] == {"target": "rocket"}
    assert trail["edited"]["reason"] == "the rocket is booked"
    assert trail["responded"]["result"] == "probe is already up"
    assert trail["result"]["result"] == "teal" and trail["result"]["tool"] == "ask_in_browser"
    assert state["status"] == "waiting" and state["pending_approvals"] == {}


async def _shoot(page: Any, out: Path) -> None:
    """A screenshot for the docs (`out`), once what it shows has settled; the docs have one of
    that name and size (a PNG some page shows)."""
    await page.fill("#message", "")
    await page.evaluate("() => { const log = document.getElementById('log'); "
                        "log.scrollTop = log.scrollHeight; }")
    await page.wait_for_timeout(300)
    await page.screenshot(path=str(out), animations="disabled", caret="hide")
    taken, shown = out.read_bytes(), (IMAGES / out.name).read_bytes()
    assert taken[:8] == shown[:8] == b"\x89PNG\r\n\x1a\n"
    assert taken[16:24] == shown[16:24]  # the IHDR's width and height: 1000 x 560
    pages = (IMAGES.parent / "human-in-the-loop.md", IMAGES.parent / "client-tools.md")
    assert any(f"images/{out.name})" in p.read_text(encoding="utf-8") for p in pages), out.name
