"""A user's first hour with `towline run` (issue 30 items 8 and 9), through the CLI as
subprocesses against live servers: the first run's UI link, an approved call's lines."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TESTS_ON_PATH, towline, towline_process
from ports import free_port
from readme import cli_env, read_until
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from towline.cli.progress import Progress
from towline.events import RunEvent
from towline.runtime.ledger import HEADER_KEY, MEMO_KEY

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


def _numbers(payload: Payload) -> dict[str, Any]:
    """A `towline.counters` payload's JSON, checked to be proto3 JSON of `RunCounters`."""
    assert payload.metadata["encoding"] == b"json/protobuf"
    assert payload.metadata["messageType"] == b"towline.v1.RunCounters"
    data: dict[str, Any] = json.loads(payload.data)
    return data


async def test_the_ledgers_counters_are_numbers_in_the_memo_and_every_header(
    client: Client, target: str, namespace: str
) -> None:
    wid = f"numbers-{uuid.uuid4().hex[:8]}"
    done = await towline("run", "examples.calculator:agent", "What is 6 times 7?", "--id", wid,
                         env=cli_env(target, namespace))
    assert done.code == 0 and "Done: 2 steps, 1 tool call, 2 model requests, 30 tokens." in done.err
    handle = client.get_workflow_handle(wid)
    memo = _numbers((await handle.describe()).raw_info.memo.fields[MEMO_KEY])
    # one representation: every counter a JSON number, the 64-bit ones (requests, tokens) too
    assert {k: type(v) for k, v in memo.items()} == {
        "agentVersion": str, "inputTokens": int, "maxSteps": int, "outputRetries": int,
        "outputTokens": int, "requests": int, "runStep": int, "schemaVersion": int,
        "toolCalls": int}, memo
    assert (memo["runStep"], memo["toolCalls"], memo["requests"]) == (2, 1, 2)
    assert memo["inputTokens"] + memo["outputTokens"] == 30
    events = [e async for e in handle.fetch_history_events()]
    written = [_numbers(p) for e in events for p in (
        e.workflow_properties_modified_event_attributes.upserted_memo.fields.get(MEMO_KEY),
        e.activity_task_scheduled_event_attributes.header.fields.get(HEADER_KEY)) if p]
    assert len(written) >= 3  # the memo, and the header of each model request and tool call
    for counters in written:
        assert not [v for v in counters.values() if isinstance(v, str) and v.isdigit()], counters
    # and read back as written: towline show's counters are the memo's
    shown = json.loads((await towline("show", wid, "--json", env=cli_env(target, namespace))).out)
    assert shown["counters"]["requests"] == 2 and shown["counters"]["input_tokens"] == memo["inputTokens"]


def test_a_handoff_learnt_after_its_calls_return_is_still_reported_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `towline run` follows the run's events: the handoff comes after its call's return
    progress = Progress("run-1")
    for event in (
        {"type": "response", "step": 1, "tool_calls": [
            {"call_id": "c1", "tool": "transfer_to_billing", "args": {}}]},
        {"type": "tool_end", "step": 1, "call_id": "c1", "tool": "transfer_to_billing",
         "status": "succeeded", "content": "Transferred to billing."},
        {"type": "handoff", "step": 1, "call_id": "c1", "from_agent": "triage",
         "to_agent": "billing"},
    ):
        progress(RunEvent.model_validate({"offset": 0, **event}))
    assert capsys.readouterr().err.splitlines() == [
        "[step 1] model calls transfer_to_billing()",
        "[step 1]   transfer_to_billing -> Transferred to billing.  (succeeded)",
        "[step 1] handed off to billing",
    ]
