"""Running `towline` as a real subprocess, and waiting for what an eventually consistent store shows."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from readme import REPO, Done, cli_env

__all__ = ["towline", "towline_process", "assert_one_line_error", "until", "json_of", "cli_env"]


async def towline(*args: str, env: Mapping[str, str], cwd: Path = REPO, timeout: float = 90) -> Done:
    """Run `python -m towline.cli ARGS` and wait for it."""
    proc = await towline_process(*args, env=env, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"towline {' '.join(args)} did not finish within {timeout}s") from None
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


async def towline_process(*args: str, env: Mapping[str, str], cwd: Path = REPO) -> asyncio.subprocess.Process:
    """Start `python -m towline.cli ARGS` (stdout and stderr piped)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "towline.cli", *args, cwd=cwd, env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


def assert_one_line_error(done: Done, code: int, *fragments: str) -> None:
    """A failure the user sees as a single `towline: error:` line, never a traceback."""
    assert done.code == code, done
    assert "Traceback" not in done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("towline: error: "), done.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


async def until(
    command: Callable[[], Awaitable[Done]], ready: Callable[[Done], bool], what: str,
    timeout: float = 60,
) -> Done:
    """Repeat `command` until `ready` holds (the visibility store lags live runs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        done = await command()
        if ready(done):
            return done
        if loop.time() > deadline:
            raise AssertionError(f"never saw {what}; last answer: {done}")
        await asyncio.sleep(0.5)


def json_of(done: Done) -> Any:
    """stdout of a successful `--json` command, parsed."""
    assert done.code == 0, done
    return json.loads(done.out)
