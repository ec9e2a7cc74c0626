"""The README's "Operating runs" and "Sessions" commands, run exactly as written.

Against a `towline dev` started as the README starts it (its own SQLite state in a temporary
folder), from "other terminals": the operator's view of a waiting run, the refusal of a
reused id, a terminate through Temporal's CLI, and a session driven by `towline send`, the
`temporal` CLI's update and `towline cancel`.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from readme import Done, cli_env, read_until, readme, readme_process, stop_process


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def dev(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Path, str]]:
    """One `towline dev` as the README starts it, for both pages (their run ids differ):
    its folder and its server's address. It must stop cleanly."""
    cwd = tmp_path_factory.mktemp("dev")
    proc = await readme_process("towline dev --agent examples.calculator:agents",
                                env=cli_env(), cwd=cwd)
    try:
        said = await read_until(proc.stderr, "Ctrl-C stops.")
        match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
        assert match, said
        yield cwd, match.group(1)
    finally:
        stop_process(proc)
        await asyncio.wait_for(proc.wait(), 60)
    assert proc.returncode == 0


async def _eventually(command: Callable[[], Awaitable[Done]], want: str) -> str:
    """Run a README command until its output shows `want` (the visibility store lags)."""
    for _ in range(120):
        done = await command()
        assert done.code == 0, done
        if want in done.out:
            return done.out
        await asyncio.sleep(0.5)
    raise AssertionError(f"never saw {want!r}")


async def test_operating_runs_as_the_readme_shows(dev: tuple[Path, str]) -> None:
    folder, address = dev
    env = cli_env(address)
    done = await readme('towline run examples.calculator:agent "What is (2 + 3) * 4?" --id calc-1',
                        env=env, cwd=folder)
    assert done.code == 0 and done.out == "(2 + 3) * 4 = 20.\n", done
    again = await readme('towline run examples.calculator:agent "What is (2 + 3) * 4?" --id calc-1',
                         env=env, cwd=folder)
    assert again.code == 1 and again.out == "", again
    assert "a run with id 'calc-1' already exists (COMPLETED" in again.err
    allowed = await readme(
        'towline run examples.calculator:agent "What is (2 + 3) * 4?" --id calc-1 '
        "--allow-duplicate", env=env, cwd=folder)
    assert allowed.code == 0 and allowed.out == "(2 + 3) * 4 = 20.\n", allowed

    waiting = await readme_process(
        'towline run examples.calculator:careful_agent "What is 6 times 7?" --id careful-1',
        env=env, cwd=folder)
    await read_until(waiting.stderr, "towline approve careful-1 call_1")

    table = await _eventually(lambda: readme("towline runs", env=env, cwd=folder),
                              "careful-1    careful-calculator  waiting")
    lines = table.splitlines()
    assert lines[0].startswith("WORKFLOW ID  AGENT")
    assert lines[1].startswith("careful-1")  # live runs first
    assert sum(line.startswith("calc-1 ") for line in lines) == 2  # both runs named calc-1
    filtered = await readme("towline runs --status waiting --agent careful-calculator",
                            env=env, cwd=folder)
    assert [line.split()[0] for line in filtered.out.splitlines()[1:]] == ["careful-1"]
    stuck = await readme("towline runs --stuck", env=env, cwd=folder)
    assert stuck.code == 0 and stuck.out.startswith("No stuck runs"), stuck
    pending = await readme("towline pending", env=env, cwd=folder)
    assert pending.code == 0, pending
    head, row = pending.out.splitlines()[:2]  # as docs/cli.md shows them
    assert head.split() == ["WORKFLOW", "ID", "#", "CALL", "ID", "TOOL", "ARGUMENTS", "FOR",
                            "WAITING", "DIGEST"]
    assert row.split()[:7] == [
        "careful-1", "1", "call_1", "multiply", "a=6.0,", "b=7.0", "approval"]
    assert re.fullmatch(r"[0-9a-f]{16}", row.split()[-1]), row  # the digest
    shown = json.loads((await readme("towline show careful-1 --json", env=env,
                                     cwd=folder)).out)
    assert shown["status"] == "waiting" and shown["agent"] == "careful-calculator"
    assert [p["call_id"] for p in shown["pending_approvals"]] == ["call_1"]

    ended = await readme('temporal workflow terminate --workflow-id careful-1 --reason "not needed"',
                         env=env, cwd=folder)
    assert ended.code == 0, ended
    _, err = await asyncio.wait_for(waiting.communicate(), 60)
    assert waiting.returncode == 1
    assert "towline: run careful-1 was terminated: not needed" in err.decode()
    await _eventually(lambda: readme("towline runs", env=env, cwd=folder),
                      "careful-1    careful-calculator  terminated")


async def test_a_session_as_the_readme_shows(dev: tuple[Path, str]) -> None:
    folder, address = dev
    env = cli_env(address)
    session = await readme_process(
        'towline run examples.calculator:agent "What is 6 times 7?" --session --id chat-1',
        env=env, cwd=folder)
    try:
        assert session.stdout is not None
        assert await asyncio.wait_for(session.stdout.readline(), 90) == b"6 times 7 is 42.\n"
        await read_until(session.stderr, "towline cancel chat-1")
        sent = await readme('towline send chat-1 "What is 2 plus 3?"', env=env, cwd=folder)
        assert sent.code == 0 and sent.out == "2 plus 3 is 5.\n", sent
        updated = await readme(
            "temporal workflow update execute --name send --workflow-id chat-1 "
            "--input '{\"content\": \"What is 2 plus 2?\"}'", env=env, cwd=folder)
        assert updated.code == 0, updated
        assert "2 plus 2 is 4." in updated.out
        cancelled = await readme("towline cancel chat-1", env=env, cwd=folder)
        assert cancelled.code == 0, cancelled
        _, err = await asyncio.wait_for(session.communicate(), 60)
    finally:
        stop_process(session, signal.SIGKILL)
    assert session.returncode == 1, err.decode()
    assert "run chat-1 failed: Cancelled" in err.decode()
