"""Take the docs' screenshots of the Temporal UI (run from the repository root).

    python scripts/screenshots.py [--out docs/images] [--chromium /usr/bin/chromium]

Starts `towline dev` for the calculator agents (a throwaway state folder, free ports), runs
`calc-1` to completion and starts `careful-1`, which waits for the approval of its
`multiply` call, then photographs the Temporal UI with headless Chromium (Playwright):

- `ui-timeline.png`: `calc-1`'s page, its timeline with each activity's summary
  (`calculator-offline · step 1`, `multiply(a=6.0, b=7.0)`, ...);
- `ui-memo.png`: `calc-1`'s memo, the ledger's counters (`towline.counters`);
- `ui-approval.png`: `careful-1` waiting, its current details naming the call.

Then it approves the call, lets `careful-1` finish and stops the server. The pictures are
regenerated, never drawn by hand: run it again after a change to what a run shows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.async_api import ViewportSize

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT: ViewportSize = {"width": 1440, "height": 960}
COMPLETED = "calc-1"
WAITING = "careful-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(address: str | None = None) -> dict[str, str]:
    """This interpreter's `towline`, the repository importable (for `examples.*`), no
    inherited Temporal or towline settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TOWLINE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if address:
        env["TEMPORAL_ADDRESS"] = address
    return env


async def _towline(*args: str, env: Mapping[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "towline.cli", *args, cwd=ROOT, env=dict(env),
        start_new_session=True, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _until(stream: asyncio.StreamReader | None, marker: str, timeout: float = 120) -> str:
    """What `stream` says up to the line holding `marker`."""
    assert stream is not None
    said = ""
    async with asyncio.timeout(timeout):
        while marker not in said:
            line = await stream.readline()
            if not line:
                raise RuntimeError(f"the process ended before {marker!r}:\n{said}")
            said += line.decode(errors="replace")
    return said


def _stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGINT) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


async def _photograph(ui: str, out: Path, chromium: str) -> list[Path]:
    from playwright.async_api import async_playwright

    run_page = f"{ui}/namespaces/default/workflows"
    shots: list[Path] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page(viewport=VIEWPORT)

            await page.goto(f"{run_page}/{COMPLETED}", wait_until="load")
            await page.get_by_role("heading", name=COMPLETED).first.wait_for()
            await page.get_by_text("multiply(a=6.0, b=7.0)").first.wait_for()
            timeline = page.get_by_role("heading", name="Timeline", exact=True)
            await timeline.scroll_into_view_if_needed()
            await page.mouse.move(0, 0)
            await page.wait_for_timeout(500)
            shots.append(out / "ui-timeline.png")
            top = await timeline.bounding_box()
            assert top is not None
            await page.screenshot(path=shots[-1], full_page=True, clip={
                "x": 256, "y": top["y"] - 16, "width": VIEWPORT["width"] - 256, "height": 330})

            await page.get_by_role("tab", name="Memo").click()
            await page.get_by_text("towline.counters").first.wait_for()
            await page.wait_for_timeout(500)
            shots.append(out / "ui-memo.png")
            await page.screenshot(path=shots[-1], clip={
                "x": 256, "y": 60, "width": VIEWPORT["width"] - 256, "height": 640})

            await page.goto(f"{run_page}/{WAITING}", wait_until="load")
            await page.get_by_role("heading", name=WAITING).first.wait_for()
            await page.get_by_text("towline.model_request").first.wait_for()  # the timeline drew
            await page.get_by_role("tab", name="User Metadata").click()
            # the UI renders the details' Markdown in frames of their own
            await page.frame_locator("iframe").last.get_by_text("waiting for approval").wait_for()
            await page.wait_for_timeout(500)
            shots.append(out / "ui-approval.png")
            await page.screenshot(path=shots[-1], clip={
                "x": 256, "y": 60, "width": VIEWPORT["width"] - 256, "height": 520})
        finally:
            await browser.close()
    return shots


async def main(out: Path, chromium: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="towline-screenshots-") as state:
        dev = await _towline(
            "dev", "--agent", "examples.calculator:agents", "--state-dir", state,
            "--port", str(_free_port()), "--ui-port", str(_free_port()), env=_env())
        try:
            said = await _until(dev.stderr, "Ctrl-C stops.")
            address = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
            ui = re.search(r"^Temporal UI\s+(\S+)", said, flags=re.MULTILINE)
            if not (address and ui):
                raise RuntimeError(f"towline dev did not say its addresses:\n{said}")
            env = _env(address.group(1))
            done = await _towline("run", "examples.calculator:agent",
                                  "What is 2 plus 3 and 6 times 7?", "--id", COMPLETED,
                                  "--no-worker", env=env)
            _, err = await asyncio.wait_for(done.communicate(), 120)
            if done.returncode != 0:
                raise RuntimeError(f"{COMPLETED} failed:\n{err.decode()}")
            waiting = await _towline("run", "examples.calculator:careful_agent",
                                     "What is 6 times 7?", "--id", WAITING, "--no-worker", env=env)
            try:
                await _until(waiting.stderr, "waiting for approval")
                shots = await _photograph(ui.group(1), out, chromium)
                approve = await _towline("approve", WAITING, "call_1", env=env)
                await asyncio.wait_for(approve.communicate(), 60)
                await asyncio.wait_for(waiting.communicate(), 60)
            finally:
                _stop(waiting, signal.SIGKILL)
        finally:
            _stop(dev)
            await asyncio.wait_for(dev.wait(), 60)
    return shots


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Take the docs' screenshots of the Temporal UI: towline dev, two calculator "
                    "runs (one done, one waiting for approval), headless Chromium.")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="folder for the PNG files (default: docs/images)")
    parser.add_argument("--chromium", default=CHROMIUM,
                        help="the Chromium executable Playwright drives (default: /usr/bin/chromium)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = _args()
    for shot in asyncio.run(main(args.out, args.chromium)):
        print(shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot)
