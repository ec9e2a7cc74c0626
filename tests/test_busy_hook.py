"""A hook that keeps the worker busy past Temporal's deadlock detector, seen and got out of.

Such a hook fails the run's *workflow task* (Temporal's 2 s deadlock detector,
`TMPRL1101`) on every attempt: the run stays RUNNING and makes no progress. It
is user code towline cannot make deterministic-safe, so the operator must see it
(`towline runs --stuck`, with the failure the history recorded) and have a way
out: fix the hook and the next attempt goes on from where the run stopped,
without losing anything (the README's rule: heavy work belongs in an activity).
"""

from __future__ import annotations

import time
import uuid

from cli_helpers import cli_env, json_of, towline, until
from temporalio import workflow
from temporalio.client import Client

from towline import Agent, Capability, ModelRequestState
from towline.client import start_run
from towline.models import TestModel
from towline.results import RunResult
from towline.testing import towline_worker

BURN_SECONDS = 2.5
burning = True
"""Whether `Busy` burns; the test "redeploys" the fix by clearing it (same agent version)."""


class Busy(Capability):
    """Scores something expensive inline: the mistake the README warns about."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        if burning:
            # The clock is read on purpose, to spin for a fixed time whatever the machine.
            with workflow.unsafe.sandbox_unrestricted():
                end = time.monotonic() + BURN_SECONDS
                while time.monotonic() < end:
                    pass
        return state


agent = Agent(name="busy-hook", model=TestModel(custom_output_text="done"), capabilities=[Busy()])


async def test_a_hook_past_the_deadlock_detector_is_listed_stuck_and_a_fix_resumes_it(
    client: Client, target: str, namespace: str,
) -> None:
    global burning
    env = cli_env(target, extra={"TEMPORAL_NAMESPACE": namespace})
    run_id = f"busy-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "go", task_queue=queue, id=run_id)

        def is_stuck(done: object) -> bool:
            rows = json_of(done)  # type: ignore[arg-type]
            return len(rows) == 1 and rows[0]["attempt"] > 1

        done = await until(
            lambda: towline("runs", "--stuck", "--query", f'WorkflowId = "{run_id}"', "--json",
                            env=env),
            is_stuck, "the busy run listed as stuck", timeout=90)
        (row,) = json_of(done)
        assert row["workflow_id"] == run_id and row["agent"] == "busy-hook"
        assert "TMPRL1101" in row["failure"] and "deadlock" in row["failure"].lower(), row
        description = await handle.describe()
        assert description.status is not None and description.status.name == "RUNNING"

        burning = False  # the fix, deployed
        try:
            result = await handle.result(rpc_timeout=None)
        finally:
            burning = True
    assert isinstance(result, RunResult)
    assert result.output == "done"
    assert result.counters.run_step == 1 and result.counters.requests == 1
