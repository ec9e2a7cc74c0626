"""The README's test command on a machine without the browser: the page test is reported as
skipped with one line saying how to install it, and under ``CI=true`` it fails instead.

Runs the real `tests/test_serve_browser.py` in a pytest subprocess whose PATH has no
`chromium` (only this venv's scripts): the browser is looked for before the test's worker and
page start, so each run takes a couple of seconds.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from machine_tools import CHROMIUM_HINT
from readme import BIN, REPO

BROWSER_TEST = "tests/test_serve_browser.py"


async def _pytest_without_chromium(tmp_path: Path, ci: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(BIN)  # the venv's scripts: no /usr/bin, so no chromium
    if ci is not None:
        env["CI"] = ci
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", BROWSER_TEST,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def test_outside_ci_a_missing_browser_is_one_skipped_line_saying_how_to_install_it(
    tmp_path: Path,
) -> None:
    code, out = await _pytest_without_chromium(tmp_path, None)
    assert code == 0, out
    skipped = re.search(r"(\d+) skipped", out)
    assert skipped and "failed" not in out and "passed" not in out, out
    # one line per page test, each saying how to install the browser
    reasons = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(reasons) == int(skipped.group(1)) >= 1, out
    assert all(f"chromium is not installed: {CHROMIUM_HINT}" in r for r in reasons), reasons
    assert "Traceback" not in out


async def test_under_ci_a_missing_browser_fails_the_test(tmp_path: Path) -> None:
    code, out = await _pytest_without_chromium(tmp_path, "true")
    assert code == 1, out
    assert re.search(r"\d+ (error|failed)", out) and "skipped" not in out, out
    assert "passed" not in out, out
    assert "CI=true: a test that needs it must not skip" in out
