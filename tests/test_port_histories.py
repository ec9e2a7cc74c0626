"""The recordings of guardrails and handoffs (`tests/history_port.py`), recorded live
by `scripts/record_history.py` on the session's dev server and replayed with today's code.

This test records them into a temporary folder (so `scripts/record_history.py` itself is
exercised), checks that each holds what it is recorded for, and replays every execution
without a nondeterminism.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import patch_ids
from history_agents import HISTORY_AGENTS
from history_port import PORT_RECORDINGS, billing_agent
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from towline.runtime.fingerprint import agent_version
from towline.runtime.plugin import TowlinePlugin
from towline.testing import load_history
from towline.workflows import AgentRun
from towline.workflows.versions import version_patch

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_history", ROOT / "scripts" / "record_history.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kinds(path: Path) -> list[str]:
    data: dict[str, Any] = json.loads(path.read_text())
    return [e["eventType"] for e in data["events"]]


async def test_the_guardrail_and_handoff_recordings_replay(
    env: WorkflowEnvironment, tmp_path: Path,
) -> None:
    ids = {workflow_id for workflow_id, _ in PORT_RECORDINGS}
    written = await _recorder().record(tmp_path, ids, env=env)
    names = {p.name for p in written}
    assert {"history-guardrail-trip.json", "history-tool-guardrails.json",
            "history-handoff.json", "history-handoff.run2.json"} <= names

    trip = _kinds(tmp_path / "history-guardrail-trip.json")
    assert trip.count("EVENT_TYPE_ACTIVITY_TASK_SCHEDULED") == 2  # the guard's and the run's
    assert "EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED" in trip
    assert "EVENT_TYPE_ACTIVITY_TASK_CANCELED" in trip
    assert trip[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_FAILED"
    tools = (tmp_path / "history-tool-guardrails.json").read_text()
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED" in tools
    handoff = load_history(tmp_path / "history-handoff.json")
    assert version_patch(agent_version(billing_agent)) in patch_ids(handoff.events)
    assert handoff.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW

    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=HISTORY_AGENTS)])
    for path in written:
        result = await replayer.replay_workflow(load_history(path), raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"
