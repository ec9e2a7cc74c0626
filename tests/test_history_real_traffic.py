"""The recordings of filtered and malformed answers (`history_real_traffic.py`), recorded
live into a temporary folder and replayed against today's `AgentRun`: a filtered answer ends the run after one model request, a malformed one
is retried once, and both replay without nondeterminism."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import patch_ids
from history_agents import HISTORY_AGENTS, RECORDINGS
from history_real_traffic import REAL_TRAFFIC_RUNS
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer

from towline.runtime.fingerprint import agent_version
from towline.runtime.plugin import TowlinePlugin
from towline.runtime.search_attributes import start_attributes
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun
from towline.workflows.versions import version_patch


def _model_requests(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
               and e.activity_task_scheduled_event_attributes.activity_type.name
               == "towline.model_request")


async def test_the_real_traffic_recordings_record_and_replay(
    client: Client, tmp_path: Path
) -> None:
    ours = {workflow_id for workflow_id, _, _ in REAL_TRAFFIC_RUNS}
    recordings = [r for r in RECORDINGS if r.workflow_id in ours]
    assert {r.workflow_id for r in recordings} == ours  # registered in history_agents
    agents = [a for a in HISTORY_AGENTS if a.name in {r.input.agent for r in recordings}]
    outcomes: dict[str, str] = {}
    async with towline_worker(client, agents) as (tc, queue):
        for rec in recordings:
            agent = next(a for a in agents if a.name == rec.input.agent)
            handle = await tc.start_workflow(  # as `start_run` starts it (the recording says so)
                "AgentRun", rec.input.model_dump(mode="json"), id=f"{rec.workflow_id}-{tmp_path.name}",
                task_queue=queue, memo=rec.memo,
                search_attributes=start_attributes(agent.name, agent_version(agent)))
            try:
                await handle.result()
                outcomes[rec.workflow_id] = "succeeded"
            except WorkflowFailureError as e:
                outcomes[rec.workflow_id] = getattr(e.cause, "type", "") or "failed"
            [history] = await execution_histories(tc, handle.id)
            (tmp_path / f"{rec.workflow_id}.json").write_text(history.to_json())
    assert outcomes == {"history-filtered": "ContentFiltered",
                        "history-malformed": "succeeded"}

    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=agents)])
    for rec in recordings:
        history = WorkflowHistory.from_json(rec.workflow_id,
                                            (tmp_path / f"{rec.workflow_id}.json").read_text())
        await replayer.replay_workflow(history)  # raises on nondeterminism
        agent = next(a for a in agents if a.name == rec.input.agent)
        # 1.0: the agent version's marker, and no engine marker
        assert patch_ids(history.events) == [version_patch(agent_version(agent))]
        expected = 1 if rec.workflow_id.endswith("filtered") else 2
        assert _model_requests(history) == expected, rec.workflow_id
