"""A worker process is SIGKILLed mid-run; a fresh worker process finishes the run.

The worker runs `tests/worker_main.py` in its own process against the session
dev server. Effects and executions are counted in files keyed by each tool
call's idempotency key (see `durable_agents`), so the tests can assert what a
user cares about: every confirmed tool call took effect exactly once, and calls
(and model requests) completed before the crash were never executed again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
import pytest_asyncio
from durable_agents import (
    WorkerProcess,
    call_keys,
    crash_model_agent,
    crash_tool_agent,
    effects,
    executions,
    model_attempts,
    wait_for_file,
)
from temporalio.client import Client

from scripts import returns
from towline.client import start_run
from towline.runtime.plugin import TowlinePlugin

pytestmark = pytest.mark.timeout(90)


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    """A client with towline's data converter (the workers run elsewhere)."""
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


@pytest.fixture
def workers(target: str, namespace: str, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Worker processes made by the test; all are killed at the end, logs shown on failure."""
    made: list[WorkerProcess] = []
    yield made
    for w in made:
        w.kill()
    if made:  # all workers of a test share one log file
        print(made[0].log())


def _spawn(workers: list[WorkerProcess], target: str, namespace: str, queue: str, root: Path) -> WorkerProcess:
    w = WorkerProcess(target, queue, root, namespace)
    w.start()
    workers.append(w)
    return w


async def test_worker_killed_during_idempotent_tool(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = f"crash-tool-{uuid4().hex[:8]}"
    first = _spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, crash_tool_agent, "go", task_queue=queue)
    await wait_for_file(tmp_path / "started")
    first.kill()
    _spawn(workers, target, namespace, queue, tmp_path)
    result = await handle.result()

    assert result.output == "recorded first | slow second done"
    assert [r.status for r in returns(result.messages)] == ["succeeded", "succeeded"]
    before, slow = call_keys(result)
    # Each confirmed call took effect exactly once, the slow one despite the crash.
    assert effects(tmp_path) == {before: 1, slow: 1}
    # The call finished before the crash never ran again; the slow one ran twice
    # (killed, then retried on the new worker, which found its effect applied).
    assert executions(tmp_path) == {before: 1, slow: 2}
    # Model requests made before the crash were replayed from history, not repeated.
    assert model_attempts(tmp_path, handle.id) == {1: 1, 2: 1, 3: 1}
    assert (result.counters.run_step, result.counters.tool_calls) == (3, 2)


async def test_worker_killed_during_model_request(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = f"crash-model-{uuid4().hex[:8]}"
    first = _spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, crash_model_agent, "go", task_queue=queue)
    await wait_for_file(tmp_path / "model-started")
    first.kill()
    _spawn(workers, target, namespace, queue, tmp_path)
    result = await handle.result()

    assert result.output == "recorded before | recorded after"
    assert [r.status for r in returns(result.messages)] == ["succeeded", "succeeded"]
    before, after = call_keys(result)
    assert effects(tmp_path) == {before: 1, after: 1}
    assert executions(tmp_path) == {before: 1, after: 1}
    # Only the interrupted model request was attempted again.
    assert model_attempts(tmp_path, handle.id) == {1: 1, 2: 2, 3: 1}
    assert result.counters.requests == 3
