"""A user's first hour with `towline run` (issue 30 items 8 and 9), through the CLI as
subprocesses against live servers: the first run's UI link, an approved call's lines."""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from cli_helpers import TESTS_ON_PATH, towline, towline_process
from readme import cli_env, read_until

from towline.devserver import free_port

LATER_LINK = re.compile(r"^UI: (http://\S+) \(open it while `(towline dev[^`]*)` runs: this "
                        r"command's server stops with it\)$", re.MULTILINE)
"""The first run's last line: its link, and the command that serves the link again."""


def _status(url: str) -> int | None:
    """The HTTP status of a GET of `url`; None if nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


async def test_the_first_runs_link_says_how_to_open_it_and_then_opens(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = cli_env(f"127.0.0.1:{port}")
    wid = f"first-{uuid.uuid4().hex[:8]}"
    done = await towline("run", "examples.calculator:agent", "What is 6 times 7?", "--id", wid,
                         "--ui-port", str(ui_port), env=env, cwd=tmp_path)
    assert done.code == 0 and done.out == "6 times 7 is 42.\n", done
    assert "starting an embedded one" in done.err
    match = LATER_LINK.search(done.err)
    assert match, done.err
    url, dev_command = match.groups()
    assert url == f"http://localhost:{ui_port}/namespaces/default/workflows/{wid}"
    assert dev_command == f"towline dev --ui-port {ui_port}"  # the port the link names
    assert _status(url) is None  # the embedded server stopped with the command

    dev = await towline_process(*shlex.split(dev_command)[1:], env=env, cwd=tmp_path)
    try:
        await read_until(dev.stderr, "Ctrl-C stops.")
        assert await asyncio.to_thread(_status, url) == 200  # the same link, now served
    finally:
        if dev.returncode is None:
            dev.send_signal(signal.SIGINT)
        await asyncio.wait_for(dev.wait(), 60)
    assert dev.returncode == 0


async def test_an_approved_call_is_shown_once_in_one_form_and_resumes_before_its_return(
    target: str, namespace: str
) -> None:
    env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
    wid = f"approved-{uuid.uuid4().hex[:8]}"
    waiting = await towline_process("run", "first_hour_agents:slow_careful", "What is 6 times 7?",
                                    "--id", wid, env=env)
    try:
        said = await read_until(waiting.stderr, f"towline approve {wid} call_1")
        approved = await towline("approve", wid, "call_1", env=env)
        assert approved.code == 0, approved
        out, err = await asyncio.wait_for(waiting.communicate(), 60)
    finally:
        if waiting.returncode is None:
            waiting.kill()
    assert waiting.returncode == 0 and out.decode() == "6 times 7 is 42.\n", err
    lines = (said + err.decode()).splitlines()
    # the call's arguments as the tool runs them, in the call's line and its approval's alike
    assert "[step 1] model calls multiply(a=6.0, b=7.0)" in lines
    assert "waiting for approval: multiply(a=6.0, b=7.0)  (call id call_1)" in lines
    assert "#1 multiply(a=6.0, b=7.0)" in approved.out
    # `resumed` comes before the return of the call it allowed, and once
    assert lines.count("resumed") == 1, lines
    assert lines.index("resumed") < lines.index("[step 1]   multiply -> 42  (succeeded)"), lines
