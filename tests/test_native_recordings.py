"""The native-tool recordings of `tests/history_engine4_native.py`, recorded live here (until the
engine-4 histories are committed) and replayed against today's `AgentRun`: a paused turn
continued within its step, and a background model call polled between durable timers."""

from __future__ import annotations

import json
from typing import Any

from history_agents import ENGINE4_RECORDINGS, HISTORY_AGENTS
from history_engine4_native import NATIVE_AGENTS
from temporalio.client import Client
from temporalio.worker import Replayer

from towline.results import RunResult
from towline.runtime.plugin import TowlinePlugin
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun
from towline.workflows.versions import ENGINES

RECORDINGS = {r.workflow_id: r for r in ENGINE4_RECORDINGS if r.workflow_id.startswith("history-native4-")}


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
    assert set(RECORDINGS) == {"history-native4-paused", "history-native4-background"}
    async with towline_worker(client, NATIVE_AGENTS) as (tc, queue):
        results: dict[str, RunResult] = {}
        histories: dict[str, Any] = {}
        for workflow_id, rec in RECORDINGS.items():
            handle = await tc.start_workflow("AgentRun", rec.input, id=f"{workflow_id}-{queue}",
                                             task_queue=queue, result_type=RunResult)
            results[workflow_id] = await handle.result()
            [histories[workflow_id]] = await execution_histories(tc, handle.id)

    paused = results["history-native4-paused"]
    assert paused.output == "21 doubled is 42." and (paused.counters.run_step, paused.counters.requests) == (2, 3)
    assert _commands(list(histories["history-native4-paused"].events)) == [
        "towline.model_request: history-native4-model · step 1 · web_search, code_execution",
        "towline.model_request: history-native4-model · step 1 · web_search, code_execution",
        "towline.tool.double4: double4(n=21)",
        "towline.model_request: history-native4-model · step 2 · web_search, code_execution"]
    [turn, _] = [m for m in paused.messages if m.kind == "response"]
    assert [p.part_kind for p in turn.parts] == [  # the whole turn, in one response
        "native_tool_call", "native_tool_return", "text", "native_tool_call", "native_tool_return",
        "tool_call"]
    assert paused.usage.native_tool_uses == {"code_execution": 1, "web_search": 1}

    background = results["history-native4-background"]
    assert background.output == "Researched in the background."
    assert _commands(list(histories["history-native4-background"].events)) == [
        "towline.model_request: history-native4-background-model · step 1", "timer",
        "towline.model_poll: history-native4-background-model · step 1 · poll 1", "timer",
        "towline.model_poll: history-native4-background-model · step 1 · poll 2"]

    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=HISTORY_AGENTS)])
    for workflow_id, history in histories.items():
        assert any(e.HasField("marker_recorded_event_attributes") and ENGINES[0][0] in str(e)
                   for e in history.events), workflow_id
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, f"{workflow_id}: {replayed.replay_failure!r}"
