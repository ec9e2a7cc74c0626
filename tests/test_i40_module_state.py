"""A hook that keeps module-level state fails its run on the first run, not on a replay
(issue 40, round 4's leftover, the guard's part).

Module-level state a hook writes is shared by every run on a worker process: a later run
takes another path than a fresh worker's replay of it takes, and that replay fails on
nondeterminism for good (`tests/test_i40_stuck.py`: `towline runs --stuck` lists such a run).
The determinism guard now compares a fingerprint of the hook's module before and after each
call: the FIRST run on a fresh worker fails with `NondeterministicHook` naming the global, and
the change is undone, so the next run fails the same way instead of taking the other path. A
hook that only reads module-level constants (and a `functools.cache` memo) runs as before.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest
from durable_agents import WorkerProcess
from i40_module_state_agents import constants, counting, stateful
from temporalio.client import Client

from towline.client import run
from towline.errors import RunError
from towline.runtime.plugin import TowlinePlugin

pytestmark = [pytest.mark.timeout(180)]


async def test_module_state_in_a_hook_fails_the_first_run_naming_the_global(
    target: str, namespace: str, tmp_path: Path
) -> None:
    tc = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    queue = f"modstate-{uuid4().hex[:8]}"
    worker = WorkerProcess(target, queue, tmp_path, namespace,
                           agents="i40_module_state_agents:AGENTS")
    worker.start()
    try:
        failures: list[RunError] = []
        for prompt in ("first", "second"):  # a fresh worker process: its first run, then another
            with pytest.raises(RunError) as caught:
                await run(tc, stateful, prompt, task_queue=queue)
            failures.append(caught.value)
        with pytest.raises(RunError) as counted:
            await run(tc, counting, "count", task_queue=queue)
        fine = [await run(tc, constants, f"read {i}", task_queue=queue) for i in range(2)]
    finally:
        worker.kill()
    first, second = failures
    assert first.reason == "NondeterministicHook", first
    assert first.message.startswith(
        "FirstRunPause.before_model_request changed module-level state `_FIRST` of module "
        "i40_module_state_agents: the list it is bound to was changed in place"), first.message
    assert "shared by every run on a worker" in first.message
    assert "state_schema" in first.message
    assert first.partial is not None and first.partial.counters.requests == 0  # no model call
    # the change was undone: the next run on the same worker sees what a fresh worker sees
    assert second.reason == "NondeterministicHook" and "`_FIRST`" in second.message, second
    assert counted.value.reason == "NondeterministicHook", counted.value
    assert "`_CALLS` of module i40_module_state_agents: it was bound to another value" in (
        counted.value.message), counted.value.message
    # a hook that only reads module-level constants (and a functools.cache memo) is fine
    assert all(r.output for r in fine), fine
    assert all(r.counters.requests >= 1 for r in fine), fine
