"""Sessions from the command line: `towline run --session`, `towline send`, `towline cancel`.

Every command is a real subprocess against the session's dev server; the worker runs in the
test process.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, cli_env, json_of, towline, towline_process, until
from readme import Done, read_until
from temporalio.client import Client

from examples.calculator import agent as calculator
from towline.cli import run_cli
from towline.testing import towline_worker


def _texts(shown: dict[str, Any]) -> list[str]:
    """Every part's content in `towline show --json`'s messages."""
    messages: list[dict[str, Any]] = shown["messages"]
    return [str(p.get("content")) for m in messages for p in m["parts"]]


async def test_a_session_answers_sends_and_ends_cancelled(
    client: Client, target: str, namespace: str
) -> None:
    env = cli_env(target, namespace)
    wid = f"chat-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [calculator]) as (_, queue):
        proc = await towline_process(
            "run", "examples.calculator:agent", "What is 6 times 7?", "--session", "--no-worker",
            "--task-queue", queue, "--id", wid, env=env)
        try:
            assert proc.stdout is not None
            first = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert first == b"6 times 7 is 42.\n"  # the answer to the prompt, as a run prints it
            said = await read_until(proc.stderr, f"towline cancel {wid}")
            assert f'towline send {wid} "..."' in said

            listed = await until(
                lambda: towline("runs", "--query", f'WorkflowId = "{wid}"', "--json", env=env),
                lambda d: d.code == 0 and [r["status"] for r in json_of(d)] == ["waiting"],
                "the session waiting")
            assert json_of(listed)[0]["run_step"] == 2

            sent = await towline("send", wid, "What is 2 plus 3?", env=env)
            assert sent.code == 0 and sent.out == "2 plus 3 is 5.\n", sent
            as_json = await towline("send", wid, "What is 2 plus 2?", "--json", env=env)
            assert json_of(as_json) == "2 plus 2 is 4."
            queued = await towline("send", wid, "What is 3 times 3?", "--no-wait", env=env)
            assert queued.code == 0 and queued.out == "", queued
            assert f"sent to run {wid}" in queued.err
            await until(lambda: towline("show", wid, "--json", env=env),
                        lambda d: d.code == 0 and "3 times 3 is 9." in _texts(json_of(d)),
                        "the answer to the message sent without waiting")

            cancelled = await towline("cancel", wid, env=env)
            assert cancelled.code == 0, cancelled
            assert f"cancel requested for run {wid}" in cancelled.out
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        # the command followed the session, printing each turn, until it ended
        progress = said + err.decode()
        assert "[user] What is 2 plus 3?" in progress and "[user] What is 3 times 3?" in progress
        assert proc.returncode == 1, progress
        assert f"run {wid} failed: Cancelled" in progress

        shown = json_of(await towline("show", wid, "--json", env=env))
        assert shown["failure"]["reason"] == "Cancelled"
        assert [t for t in _texts(shown) if t.startswith("What")] == [
            "What is 6 times 7?", "What is 2 plus 3?", "What is 2 plus 2?", "What is 3 times 3?"]
        after = await towline("send", wid, "Still there?", env=env)
        assert_one_line_error(after, 1, f"run {wid!r} has ended (FAILED)")


def test_session_and_json_cannot_be_combined(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["run", "examples.calculator:agent", "hi", "--session", "--json"]) == 2
    captured = capsys.readouterr()
    assert_one_line_error(Done(2, captured.out, captured.err), 2,
                          "a session's answers are printed as they come")
