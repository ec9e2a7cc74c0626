"""A worker process SIGKILLed as a run continues-as-new; fresh workers finish the run.

An execution that continued-as-new empties its copy of the conversation in memory
(`workflows.continuation.release`): whatever a crash interrupts, the next execution must start
from what Temporal holds (the carried input), and the run end exactly as an
uninterrupted one would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from uuid import uuid4

import pytest
from durable_agents import WorkerProcess
from temporalio.client import Client

from scripts import returns
from towline.results import RunInput, RunResult
from towline.runtime.plugin import TowlinePlugin
from towline.testing import execution_histories

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]

STEPS = 120  # test_long_run's `brief` agent


async def test_killed_at_each_continue_as_new(target: str, namespace: str, tmp_path: Path) -> None:
    client = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    queue = f"crash-can-{uuid4().hex[:8]}"
    workers: list[WorkerProcess] = []

    def spawn() -> None:
        w = WorkerProcess(target, queue, tmp_path, namespace, agents="test_long_run:BRIEF_AGENTS")
        w.start()
        workers.append(w)

    spawn()
    try:
        handle = await client.start_workflow(
            "AgentRun", RunInput(agent="brief-run", prompt="go", continue_as_new_after_events=300),
            id=f"crash-can-{uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
        seen = {handle.first_execution_run_id}
        kills = 0
        while kills < 3:  # kill the worker as soon as each new execution appears
            run_id = (await client.get_workflow_handle(handle.id).describe()).run_id
            if run_id not in seen:
                seen.add(str(run_id))
                workers[-1].kill()
                kills += 1
                spawn()
            await asyncio.sleep(0.05)
        result = await asyncio.wait_for(handle.result(), 200)
        chain = await execution_histories(client, handle.id, handle.first_execution_run_id)
    finally:
        for w in workers:
            w.kill()
        if workers:
            print(workers[0].log())

    assert (result.counters.run_step, result.counters.tool_calls) == (STEPS + 1, STEPS)
    assert result.output == f"added {STEPS} times"
    added = returns(result.messages)
    assert [r.status for r in added] == ["succeeded"] * STEPS
    assert [r.content for r in added] == [step + 1 for step in range(1, STEPS + 1)]
    assert len(chain) >= 5
