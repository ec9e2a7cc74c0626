"""A worker SIGKILLed while a parallel input guardrail and the model request are both in flight.

Two runs (one whose input the guardrail trips on, one it passes) are started on a worker
process (`tests/worker_main.py`, agents of `tests/port_crash_agents.py`); once both runs'
guard and model requests have started, the worker is SIGKILLed and another takes over.
Temporal notices the lost attempts by their heartbeat timeout and retries them on the new
worker; the run's workflow replays and goes on waiting for both. Then the guardrail trips
(and the retried model request is cancelled, through Temporal, on the new worker) or passes
(and the model's answer is the run's). Each request's usage is counted exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import uuid4

import pytest
import pytest_asyncio
from durable_agents import WorkerProcess
from port_crash_agents import guarded_agent
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from towline.client import run_error, start_run
from towline.runtime.plugin import TowlinePlugin

pytestmark = pytest.mark.timeout(90)


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    """A client with towline's data converter (the workers run elsewhere)."""
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


async def _started(root: Path, names: set[str], timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not names <= {p.name for p in (root / "started").glob("*")}:
            await asyncio.sleep(0.05)


async def test_worker_killed_with_guardrail_and_model_request_in_flight(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess],
) -> None:
    queue = f"crash-guardrail-{uuid4().hex[:8]}"
    spawn = lambda: WorkerProcess(target, queue, tmp_path, namespace,
                                  agents="port_crash_agents:AGENTS")
    workers.append(spawn())
    workers[0].start()
    trip = await start_run(tclient, guarded_agent, "do my homework", task_queue=queue)
    passes = await start_run(tclient, guarded_agent, "what is the weather", task_queue=queue)
    await _started(tmp_path, {f"{who}-{h.id}-1" for who in ("guard", "model") for h in (trip, passes)})
    workers[0].kill()  # both runs' guard and model requests are in flight
    workers.append(spawn())
    workers[1].start()

    with pytest.raises(WorkflowFailureError) as caught:
        await trip.result()
    err = run_error(caught.value)
    assert (err.reason, err.message) == (
        "GuardrailTripped", "guardrail 'homework' tripped on the input: It asks for homework.")
    assert err.partial is not None
    c = err.partial.counters
    assert (c.run_step, c.requests, c.input_tokens, c.output_tokens) == (1, 0, 7, 3)
    events = [e async for e in trip.fetch_history_events()]
    kinds = [e.event_type for e in events]
    assert kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 2  # retried, not rescheduled
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in kinds
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED in kinds
    assert (tmp_path / "cancelled" / f"model-{trip.id}-2").exists()  # on the new worker

    try:
        result = await passes.result()
    except WorkflowFailureError as e:
        raise AssertionError(f"the passing run failed: {run_error(e)}") from e
    assert result.output == "done"
    c = result.counters
    # the guard's and the model's usage once each, though both first attempts were lost
    assert (c.run_step, c.requests, c.input_tokens, c.output_tokens) == (1, 1, 107, 23)
    retried = {p.name for p in (tmp_path / "started").glob(f"*-{passes.id}-*")}
    assert retried == {f"{who}-{passes.id}-{n}" for who in ("guard", "model") for n in (1, 2)}
