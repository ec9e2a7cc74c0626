"""Recorded histories replay against today's `AgentRun` without nondeterminism.

`tests/histories/` holds histories recorded by `scripts/record_history.py` from
the agents in `tests/history_agents.py`: tools with a retry, a capability with
before/after hooks, a middleware with state and a jump, structured output, a
failed run, a run that continued-as-new, an approval session, and a run whose
tools come from an MCP server (listed before every turn). A workflow change that alters the
commands those runs produced, without a `workflow.patched` guard, fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from history_agents import HISTORY_AGENTS, RECORDINGS
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from towline.plugin import TowlinePlugin
from towline.results import RunInput, RunResult
from towline.testing import towline_worker
from towline.workflows import AgentRun

HISTORIES = Path(__file__).parent / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def _replayer() -> Replayer:
    return Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=HISTORY_AGENTS)])


def _load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.name.split(".")[0], path.read_text())


def test_every_recording_has_a_committed_history() -> None:
    names = {p.name.split(".")[0] for p in FILES}
    assert names == {r.workflow_id for r in RECORDINGS}
    assert any(".run2." in p.name for p in FILES), "a continued-as-new execution is committed"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_committed_history_replays(path: Path) -> None:
    result = await _replayer().replay_workflow(_load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


async def test_replay_detects_a_changed_command() -> None:
    """The check can fail: a history whose tool activity differs from what the code schedules."""
    data: dict[str, Any] = json.loads((HISTORIES / "history-tools.json").read_text())
    renamed = 0
    for event in data["events"]:
        attrs = event.get("activityTaskScheduledEventAttributes")
        if attrs and attrs["activityType"]["name"] == "towline.tool.lookup":
            attrs["activityType"]["name"] = "towline.tool.renamed"
            renamed += 1
    assert renamed == 1
    history = WorkflowHistory.from_json("history-tools", data)
    result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError)


async def test_fresh_history_replays(client: Client) -> None:
    """Record histories now (a success, a failure, an approval session) and replay them."""
    histories: list[WorkflowHistory] = []
    async with towline_worker(client, HISTORY_AGENTS) as (tclient, queue):
        for rec in RECORDINGS:
            if rec.workflow_id not in ("history-capability", "history-failed", "history-approval"):
                continue
            handle = await tclient.start_workflow(
                "AgentRun", RunInput.model_validate(rec.input.model_dump()),
                id=f"{rec.workflow_id}-fresh-{queue}", task_queue=queue, result_type=RunResult,
            )
            if rec.interact is not None:
                await rec.interact(handle)
            try:
                await handle.result()
            except WorkflowFailureError:
                assert rec.workflow_id == "history-failed"
            histories.append(await handle.fetch_history())
    assert len(histories) == 3
    for history in histories:
        result = await _replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{history.workflow_id}: {result.replay_failure!r}"
