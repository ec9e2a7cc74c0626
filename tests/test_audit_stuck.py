"""A run that cannot move never sits unnoticed: `towline runs --stuck` and `towline show` name why.

Two ways user code gets a run there: a hook that awaits what nothing resolves (its workflow task
completes without a command: the run is running with nothing pending, and no task fails to say
so), and module-level state in a hook, which takes another path when the run is replayed
(TMPRL1100, a nondeterminism error on every attempt; docs/hook-code.md says what to use
instead). Real runs on the dev server; the commands run as subprocesses.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from cli_helpers import json_of, towline, until
from readme import cli_env
from temporalio.client import Client

from towline import Agent, Capability, ModelRequestState
from towline.cli.stalled import waits_on_nothing
from towline.client import start_run
from towline.models import TestModel
from towline.testing import towline_worker


class Forever(Capability):
    """Awaits a future that nothing will ever resolve (a hook waiting on a signal it never set)."""

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await asyncio.get_running_loop().create_future()
        return state


SEEN: set[str] = set()
"""Module-level state: the runs `Memo` has seen (survives in the process, not in the history)."""


class Memo(Capability):
    """Waits on a durable timer the first time this process sees a run (and never again)."""

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        if state.run_id not in SEEN:
            SEEN.add(state.run_id)
            await asyncio.sleep(0.01)
        return state


class Pause(Capability):
    """Waits on a one-second durable timer before each model request (a run that moves)."""

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await asyncio.sleep(1)
        return state


forever = Agent(name="audit-forever", model=TestModel(custom_output_text="done"),
                capabilities=[Forever()])
memo = Agent(name="audit-memo", model=TestModel(custom_output_text="done"),
             capabilities=[Memo()])
pause = Agent(name="audit-pause", model=TestModel(custom_output_text="done"),
              capabilities=[Pause()])


def _one(rows: Any, run_id: str) -> dict[str, Any] | None:
    found = [r for r in rows if r["workflow_id"] == run_id]
    return found[0] if found else None


async def test_a_run_waiting_on_nothing_is_listed_stuck_with_the_reason(
    client: Client, target: str, namespace: str,
) -> None:
    env = cli_env(target, namespace)
    run_id = f"forever-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [forever]) as (tclient, queue):
        handle = await start_run(tclient, forever, "go", task_queue=queue, id=run_id)
        try:
            done = await until(
                lambda: towline("runs", "--stuck", "--query", f'WorkflowId = "{run_id}"',
                                "--json", env=env),
                lambda d: d.code == 0 and _one(json_of(d), run_id) is not None,
                "the run that waits on nothing listed as stuck", timeout=30)
            row = _one(json_of(done), run_id)
            assert row is not None and row["cause"] == "NOTHING_PENDING", row
            assert "waits on nothing" in row["failure"], row
            shown = await towline("show", run_id, env=env)
            assert shown.code == 0, shown
            assert "Stuck     NOTHING_PENDING: the run is running but waits on nothing" in shown.out
        finally:
            await handle.terminate("test over")


async def test_module_level_hook_state_is_listed_stuck_as_nondeterministic(
    client: Client, target: str, namespace: str,
) -> None:
    env = cli_env(target, namespace)
    run_id = f"memo-{uuid.uuid4().hex[:8]}"
    # no cache: every workflow task replays the run from its history, as after a worker restart
    async with towline_worker(client, [memo], max_cached_workflows=0) as (tclient, queue):
        handle = await start_run(tclient, memo, "go", task_queue=queue, id=run_id)
        try:
            done = await until(
                lambda: towline("runs", "--stuck", "--query", f'WorkflowId = "{run_id}"',
                                "--json", env=env),
                lambda d: d.code == 0 and _one(json_of(d), run_id) is not None,
                "the replayed run listed as stuck", timeout=60)
            row = _one(json_of(done), run_id)
            assert row is not None and row["cause"] == "NON_DETERMINISTIC_ERROR", row
            assert "TMPRL1100" in row["failure"], row
        finally:
            await handle.terminate("test over")


async def test_a_run_that_moved_since_it_was_described_is_not_listed_stuck(client: Client) -> None:
    """`runs --stuck` describes a run, then reads its history: a run that moved in between
    (its timer fired, its next task ran) is not taken for one that waits on nothing."""
    async with towline_worker(client, [pause]) as (tclient, queue):
        handle = await start_run(tclient, pause, "go", task_queue=queue)
        async with asyncio.timeout(30):
            while True:  # the moment only the hook's timer is pending
                desc = await handle.describe()
                raw = desc.raw_description
                if not raw.HasField("pending_workflow_task") and not raw.pending_activities \
                        and raw.workflow_execution_info.history_length > 3:
                    break
                await asyncio.sleep(0.02)
        assert (await handle.result()).output == "done"
    assert await waits_on_nothing(tclient, desc) is None
