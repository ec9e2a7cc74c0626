"""The human-in-the-loop recordings (`tests/history_hitl.py`), recorded live and replayed
against today's `AgentRun`, and what their histories hold."""

from __future__ import annotations

import json
from typing import Any

from history_agents import HISTORY_AGENTS, RECORDINGS
from history_hitl import HITL_RECORDINGS
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from towline.results import RunInput, RunResult
from towline.runtime.plugin import TowlinePlugin
from towline.testing import towline_worker
from towline.workflows import AgentRun


async def _record(client: Client) -> dict[str, WorkflowHistory]:
    histories: dict[str, WorkflowHistory] = {}
    async with towline_worker(client, HISTORY_AGENTS) as (tclient, queue):
        for rec in [r for r in RECORDINGS if r.workflow_id in {h[0] for h in HITL_RECORDINGS}]:
            handle = await tclient.start_workflow(
                "AgentRun", RunInput.model_validate(rec.input.model_dump()),
                id=f"{rec.workflow_id}-{queue}", task_queue=queue, result_type=RunResult)
            if rec.interact is not None:
                await rec.interact(handle)
            await handle.result()
            histories[rec.workflow_id] = await handle.fetch_history()
    return histories


def _memos(history: WorkflowHistory, key: str) -> list[Any]:
    found: list[Any] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            fields = e.workflow_properties_modified_event_attributes.upserted_memo.fields
            if key in fields:
                found.append(json.loads(fields[key].data) if fields[key].data else None)
    return found


async def test_the_hitl_recordings_replay_and_hold_what_they_claim(client: Client) -> None:
    histories = await _record(client)
    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=HISTORY_AGENTS)])
    for name, history in histories.items():
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{name}: {result.replay_failure!r}"

    hitl = histories["history-hitl"]
    summaries = [json.loads(e.user_metadata.summary.data) for e in hitl.events
                 if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert "approval: wire(amount=50, to=\"bob\") · call big" in summaries
    updates = [e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
               for e in hitl.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert updates == ["decide", "decide", "set_policy"]
    assert "approval" in _memos(hitl, "towline.waiting")
    trail = _memos(hitl, "towline.decisions")[-1]
    assert [(e.get("call_id"), e["decision"], e["source"]) for e in trail["entries"]] == [
        ("small", "approved", "rule"), ("big", "edited", "person"), ("ask", "responded", "person"),
        ("odd", "rejected", "person"), ("again", "edited", "remembered"),
        (None, "policy", "person"), ("late", "approved", "policy")]

    client_run = histories["history-hitl-client"]
    assert "tool_result" in _memos(client_run, "towline.waiting")
    assert not any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                   and e.activity_task_scheduled_event_attributes.activity_type.name
                   == "towline.tool.browser_time" for e in client_run.events)
