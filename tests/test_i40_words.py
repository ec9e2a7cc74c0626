"""Wrong or misleading words a porting team met (issue 40, porting item 8), through the CLI.

- two models with one name were reported as an invalid Temporal address;
- a client tool's wait was announced as a wait for approval, with `towline approve`;
- a killed non-idempotent tool was first "retried elsewhere", then "not run again";
- an agent name with spaces made workflow ids with spaces.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from uuid import uuid4

import pytest
from cli_helpers import TESTS_ON_PATH, cli_env, towline, towline_process
from durable_agents import WorkerProcess, heartbeat_agent, wait_for_file
from hitl_agents import steps_prompt
from temporalio.client import Client, WorkflowFailureError

from towline.client import start_run
from towline.review import pending, tool_result
from towline.runtime.plugin import TowlinePlugin

pytestmark = [pytest.mark.timeout(120)]


async def test_two_models_of_one_name_are_named_as_such(target: str, namespace: str) -> None:
    env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
    done = await towline("worker", "--agent", "i40_word_agents:twin_a", "--agent",
                         "i40_word_agents:twin_b", "--task-queue", f"tw-{uuid4().hex[:6]}", env=env)
    assert done.code == 2, done
    assert "two different models are named 'i40-twin'" in done.err, done
    assert "Temporal address" not in done.err, done


async def test_an_agent_name_with_spaces_makes_a_workflow_id_without(
    target: str, namespace: str
) -> None:
    env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
    done = await towline("run", "i40_word_agents:spaced", "hello", "--json", env=env)
    assert done.code == 0, done
    started = re.search(r"Run (\S+) started", done.err)
    assert started is not None, done.err
    assert started.group(1).startswith("Triage-Agent-"), done.err
    shown = await towline("show", started.group(1), "--json", env=env)
    assert shown.code == 0, shown
    assert json.loads(shown.out)["agent"] == "Triage Agent"


async def test_a_client_tools_wait_is_announced_as_such(target: str, namespace: str) -> None:
    env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
    run_id = f"words-front-{uuid4().hex[:6]}"
    prompt = steps_prompt([("pick_color", {"prompt": "your favourite?"})])
    proc = await towline_process("run", "hitl_agents:front", prompt, "--id", run_id, env=env)
    tc = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    handle = tc.get_workflow_handle(run_id)
    async with asyncio.timeout(60):
        while True:
            try:
                calls = await pending(handle)
            except Exception:  # noqa: BLE001 - not started yet
                calls = []
            if calls:
                break
            await asyncio.sleep(0.1)
    watched = await towline_process("watch", run_id, env=env)
    await asyncio.sleep(1)  # the watch reads the stream up to the wait
    await tool_result(handle, calls[0].call_id, {"color": "teal"})
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    wout, _ = await asyncio.wait_for(watched.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    for text in (err.decode(), wout.decode()):
        assert "waiting for a client's result: pick_color" in text, text
        assert f"towline respond {run_id} {calls[0].call_id} --result JSON" in text, text
        assert "waiting for approval" not in text and "towline approve" not in text, text


async def test_a_killed_non_idempotent_tool_is_not_said_to_be_retried(
    target: str, namespace: str, tmp_path: Path
) -> None:
    tc = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    queue = f"words-{uuid4().hex[:8]}"
    first = WorkerProcess(target, queue, tmp_path, namespace)
    first.start()
    second: WorkerProcess | None = None
    try:
        handle = await start_run(tc, heartbeat_agent, "once_effect:hang", task_queue=queue)
        await wait_for_file(tmp_path / "started")
        first.kill()
        second = WorkerProcess(target, queue, tmp_path, namespace)
        second.start()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    finally:
        for w in (first, second):
            if w is not None:
                w.kill()
    env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
    shown = await towline("show", handle.id, env=env)
    as_json = await towline("show", handle.id, "--json", env=env)
    assert "UncertainToolEffect" in shown.out, shown
    lost = [line for line in shown.out.splitlines() if "worker lost" in line]
    assert len(lost) == 1, shown.out
    assert "retried elsewhere" not in lost[0] and "(retried" not in lost[0], lost
    assert "never one entered before" in lost[0], lost
    [attempt] = [a for a in json.loads(as_json.out)["failed_attempts"] if a["worker_lost"]]
    assert attempt["idempotent"] is False, attempt
