"""A session wedged by module-level state in user code is listed by `towline runs --stuck`
(issue 40, round 4's leftover).

Module-level state in a hook is shared by every run on one worker process: the second session
on a worker takes another path than a fresh worker's replay of it. Once the worker is gone, the
session's next message makes a fresh worker replay it; the replay fails on nondeterminism, and
no workflow task stays pending to say so (the update's task is dropped). `towline runs --stuck`
used to answer "No stuck runs"; it lists the run now, with the failure and what to do.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from uuid import uuid4

import pytest
from cli_helpers import TESTS_ON_PATH, cli_env, towline
from durable_agents import WorkerProcess
from i40_unseen_state_agents import stateful
from temporalio.client import Client

from towline.client import start_run
from towline.runtime.plugin import TowlinePlugin

pytestmark = [pytest.mark.timeout(180)]


async def test_a_session_wedged_by_module_state_is_listed_as_stuck(
    target: str, namespace: str, tmp_path: Path
) -> None:
    tc = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    queue = f"stuck-{uuid4().hex[:8]}"
    first = WorkerProcess(target, queue, tmp_path, namespace, agents="i40_unseen_state_agents:AGENTS")
    first.start()
    second: WorkerProcess | None = None
    try:
        env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
        handles = []
        for prompt in ("first", "second"):  # one after the other: the worker sees `one` first
            handle = await start_run(tc, stateful, prompt, task_queue=queue, session=True)
            async with asyncio.timeout(60):
                while (await handle.query("state"))["status"] != "waiting":
                    await asyncio.sleep(0.2)
            handles.append(handle)
        one, two = handles
        first.kill()
        second = WorkerProcess(target, queue, tmp_path, namespace, agents="i40_unseen_state_agents:AGENTS")
        second.start()
        sent = await towline("send", two.id, "again", "--wait", "10", env=env)
        assert sent.code == 1, sent
        stuck = await towline("runs", "--stuck", "--json", env=env)
        text = await towline("runs", "--stuck", env=env)
    finally:
        for w in (first, second):
            if w is not None:
                w.kill()
    assert stuck.code == 0, stuck
    rows = {r["workflow_id"]: r for r in json.loads(stuck.out)}
    assert two.id in rows, stuck.out
    assert one.id not in rows, stuck.out
    assert "nondetermin" in rows[two.id]["failure"].lower(), rows[two.id]
    assert "No stuck runs" not in text.out
    assert two.id in text.out and "NON_DETERMINISTIC_ERROR" in text.out, text.out
    assert "module-level state" in text.out and "state_schema" in text.out, text.out
    # the send says why no worker applied it: the run's task fails, not "no worker answered"
    assert "no worker answered" not in sent.err, sent
    assert "NON_DETERMINISTIC_ERROR" in sent.err and "towline runs --stuck" in sent.err, sent
    assert "pending" not in sent.err, sent  # no worker that starts would apply it
