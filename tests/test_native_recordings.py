"""The native-tool recordings of `tests/history_native.py`, recorded live here and
replayed against today's `AgentRun`: a paused turn continued within its step, and a background
model call polled between durable timers."""

from __future__ import annotations

import json
from typing import Any

from cli_helpers import patch_ids
from history_agents import HISTORY_AGENTS, RECORDINGS
from history_native import NATIVE_AGENTS
from temporalio.client import Client
from temporalio.worker import Replayer

from towline.results import RunResult
from towline.runtime.fingerprint import agent_version
from towline.runtime.plugin import TowlinePlugin
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun
from towline.workflows.versions import version_patch

NATIVE = {r.workflow_id: r for r in RECORDINGS if r.workflow_id.startswith("history-native-")}


def _commands(events: list[Any]) -> list[str]:
    """The run's activities (with their summaries) and timers, in order."""
    found: list[str] = []
    for e in events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            summary = json.loads(e.user_metadata.summary.data) if e.user_metadata.summary.data else ""
            found.append(f"{e.activity_task_scheduled_event_attributes.activity_type.name}: {summary}")
        elif e.HasField("timer_started_event_attributes"):
            found.append("timer")
    return found


async def test_the_native_recordings_record_and_replay(client: Client) -> None:
    assert set(NATIVE) == {"history-native-paused", "history-native-background"}
    async with towline_worker(client, NATIVE_AGENTS) as (tc, queue):
        results: dict[str, RunResult] = {}
        histories: dict[str, Any] = {}
        for workflow_id, rec in NATIVE.items():
            handle = await tc.start_workflow("AgentRun", rec.input, id=f"{workflow_id}-{queue}",
                                             task_queue=queue, result_type=RunResult)
            results[workflow_id] = await handle.result()
            [histories[workflow_id]] = await execution_histories(tc, handle.id)

    paused = results["history-native-paused"]
    assert paused.output == "21 doubled is 42." and (paused.counters.run_step, paused.counters.requests) == (2, 3)
    assert _commands(list(histories["history-native-paused"].events)) == [
        "towline.model_request: history-native-model · step 1 · web_search, code_execution",
        "towline.model_request: history-native-model · step 1 · web_search, code_execution",
        "towline.tool.double4: double4(n=21)",
        "towline.model_request: history-native-model · step 2 · web_search, code_execution"]
    [turn, _] = [m for m in paused.messages if m.kind == "response"]
    assert [p.part_kind for p in turn.parts] == [  # the whole turn, in one response
        "native_tool_call", "native_tool_return", "text", "native_tool_call", "native_tool_return",
        "tool_call"]
    assert paused.usage.native_tool_uses == {"code_execution": 1, "web_search": 1}

    background = results["history-native-background"]
    assert background.output == "Researched in the background."
    assert _commands(list(histories["history-native-background"].events)) == [
        "towline.model_request: history-native-background-model · step 1", "timer",
        "towline.model_poll: history-native-background-model · step 1 · poll 1", "timer",
        "towline.model_poll: history-native-background-model · step 1 · poll 2"]

    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=HISTORY_AGENTS)])
    versions = {a.name: agent_version(a) for a in NATIVE_AGENTS}
    for workflow_id, history in histories.items():
        # 1.0: the agent version's marker, and no engine marker
        assert patch_ids(history.events) == [
            version_patch(versions[NATIVE[workflow_id].input.agent])], workflow_id
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, f"{workflow_id}: {replayed.replay_failure!r}"
