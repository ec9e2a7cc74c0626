"""Runs queried from their first moment still replay.

A client that queries a run as soon as it starts (`towline pending`, the UI's
stack-trace view, a test polling `state`) can reach it during its first workflow
task, while the `towline.runtime.search_attributes` local activity runs. The SDK may then
send the activity's marker in that task and the commands after it in the next. A
replay resolves the activity in the first task again, so a `workflow.patched` made
right after it would find no marker there and fail the replay with a
nondeterminism error: the next worker to pick the run up would be stuck. Before the
`towline-version-first` patch, 3 of 20 runs queried so did not replay.
"""

from __future__ import annotations

import uuid
from itertools import pairwise
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from examples.calculator import careful_agent
from towline.client import start_run
from towline.testing import assert_replays, towline_worker

RUNS = 16


def _split_after_local_activity(history: WorkflowHistory) -> bool:
    """Whether the local activity's marker ended its workflow task (the race happened)."""
    events = list(history.events)
    for event, following in pairwise(events):
        if event.marker_recorded_event_attributes.marker_name == "core_local_activity":
            return following.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    return False


async def test_runs_queried_during_their_first_task_replay(client: Client) -> None:
    histories: list[WorkflowHistory] = []
    async with towline_worker(client, [careful_agent]) as (tc, queue):
        for _ in range(RUNS):
            handle = await start_run(tc, careful_agent, "What is 6 times 7?", task_queue=queue,
                                     id=f"query-race-{uuid.uuid4().hex[:8]}")
            state: dict[str, Any] = {}
            for _ in range(400):  # at once, as a polling client does
                state = await handle.query("state")
                if state["status"] == "waiting":
                    break
            (call_id,) = state["pending_approvals"]
            await handle.execute_update("approve", {"call_id": call_id})
            assert (await handle.result()).output == "6 times 7 is 42."
            histories.append(await handle.fetch_history())
    outcomes = await assert_replays(histories, [careful_agent])
    assert len(outcomes) == RUNS
    # How often the race happens depends on the machine; the figure is in the failure text
    # of a run that does not replay, and printed here for the curious (pytest -s).
    print(f"{sum(map(_split_after_local_activity, histories))} of {RUNS} runs split their "
          "first workflow task after the local activity")
