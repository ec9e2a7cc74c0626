"""The audit's recordings (`tests/history_audit.py`), recorded live and replayed.

Each run fails with its typed reason, and its history replays against today's agents, as the
committed ones do.
"""

from __future__ import annotations

import uuid

import pytest
from history_agents import RECORDINGS as ALL_RECORDINGS
from history_audit import AUDIT_AGENTS
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from towline import TowlinePlugin
from towline.client import run_error
from towline.results import RunResult
from towline.runtime.fingerprint import agent_version
from towline.runtime.search_attributes import start_attributes
from towline.testing import towline_worker
from towline.workflows import AgentRun

RECORDINGS = [r for r in ALL_RECORDINGS if r.workflow_id.startswith("history-audit-")]
EXPECTED = {
    "history-audit-calls": ("UsageLimitExceeded", "1001 tool calls"),
    "history-audit-state": ("PayloadTooLarge", "bigstate.after_model wrote state key 'blob'"),
    "history-audit-report": ("UsageLimitExceeded", "tool 'priced' reported usage.cost = 1e+300"),
}


async def test_the_audit_recordings_fail_typed_and_replay(client: Client) -> None:
    assert {r.workflow_id for r in RECORDINGS} == set(EXPECTED)
    [agent] = AUDIT_AGENTS
    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=AUDIT_AGENTS)])
    async with towline_worker(client, AUDIT_AGENTS) as (tclient, queue):
        for rec in RECORDINGS:
            handle = await tclient.start_workflow(
                "AgentRun", rec.input, id=f"{rec.workflow_id}-{uuid.uuid4().hex[:6]}",
                task_queue=queue, result_type=RunResult,
                search_attributes=start_attributes(agent.name, agent_version(agent)), memo=rec.memo)
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            error = run_error(failed.value)
            reason, said = EXPECTED[rec.workflow_id]
            assert error.reason == reason and said in error.message, (rec.workflow_id, error)
            history = await handle.fetch_history()
            replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert replayed.replay_failure is None, (rec.workflow_id, replayed.replay_failure)
