"""Recorded histories replay against today's `AgentRun` without nondeterminism.

`tests/histories/` holds histories recorded by `scripts/record_history.py` from
the agents in `tests/history_agents.py`: tools with a retry, a capability with
before/after hooks, a middleware with state and a jump, structured output, a
failed run, a run that continued-as-new, an approval session, a run whose tools
come from an MCP server (listed before every turn), a streamed run, a sub-agent
(child workflow), an `in_workflow` tool (TodoList), model calls made by hooks
(Summarization, ToolSelector, CompletionGate), a `wrap_model_call` chain around
ModelFallback, approval and session timeouts that fire, a run that recorded its
agent's version, a frontier-model run (thinking, images in the prompt and from a tool,
native structured output), and the topics of `tests/history_*.py` (the ledger's headers,
routing, forks, filtered answers, the audit, human in the loop, native tools, guardrails and
handoffs). They are the 1.0 baseline: one engine, no engine marker. A workflow change that
alters the commands those runs produced, without a `workflow.patched` guard (`at_least`, see
`workflows/versions.py`), fails here.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import patch_ids, towline_upserts
from history_agents import (
    HISTORY_AGENTS,
    RECORDINGS,
    flaky,
    lookup,
    tools_agent,
    tools_script,
)
from history_agents import PNG as FRONTIER_PNG
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from towline import Agent, tool
from towline.messages import (
    BinaryContent,
    ModelRequest,
    ModelResponse,
    ToolReturnPart,
    UserPart,
    media_in,
)
from towline.models import FunctionModel
from towline.results import RunInput, RunResult
from towline.runtime.converter import TowlinePayloadConverter
from towline.runtime.fingerprint import agent_version
from towline.runtime.heap import paused_gc
from towline.runtime.plugin import TowlinePlugin
from towline.testing import load_history, towline_worker
from towline.workflows import AgentRun
from towline.workflows.versions import BASE, history_engine, version_patch

HISTORIES = Path(__file__).parent / "histories"
FILES = sorted(HISTORIES.glob("*.json"))


def _replayer() -> Replayer:
    # With the store the stored recordings used: replay reads their payloads from it.
    return Replayer(workflows=[AgentRun], plugins=[
        TowlinePlugin(agents=HISTORY_AGENTS, payload_store=f"file://{HISTORIES / 'payloads'}")])


def test_every_recording_has_a_committed_history() -> None:
    names = {p.name.split(".")[0] for p in FILES}
    assert names == {r.workflow_id for r in RECORDINGS}
    assert any(".run2." in p.name for p in FILES), "a continued-as-new execution is committed"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_committed_history_replays(path: Path) -> None:
    # The collector paused: a full collection of this test process's heap (far larger than a
    # replaying worker's) inside the 10,000-call activation counted against the 2-second
    # deadlock limit on a loaded machine, which is not what these replays check.
    with paused_gc():
        result = await _replayer().replay_workflow(load_history(path),
                                                   raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


def _kinds(name: str) -> list[str]:
    """Event kinds, activity types and activity summaries of a committed history."""
    data: dict[str, Any] = json.loads((HISTORIES / name).read_text())
    found: list[str] = []
    for event in data["events"]:
        found.append(event["eventType"])
        attrs = event.get("activityTaskScheduledEventAttributes")
        if attrs:
            found.append(attrs["activityType"]["name"])
        summary = event.get("userMetadata", {}).get("summary", {}).get("data")
        if summary:
            found.append(json.loads(base64.b64decode(summary)))
    return found


def test_the_committed_histories_cover_what_they_claim() -> None:
    assert "EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED" in _kinds("history-subagent.json")
    assert "EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED" in _kinds("history-subagent.json")
    todo = _kinds("history-todo.json")
    assert "towline.tool.write_todos" not in todo  # in_workflow: no activity
    assert todo.count("towline.model_request") == 3
    summaries = " | ".join(k for k in _kinds("history-hook-models.json") if "·" in k)
    for made_by in ("summarise", "tool selection", "completion check"):
        assert made_by in summaries, made_by
    wrap = _kinds("history-wrap.json")
    assert "EVENT_TYPE_ACTIVITY_TASK_FAILED" in wrap and "history-backup · step 1" in wrap
    assert _kinds("history-timeouts.json").count("EVENT_TYPE_TIMER_FIRED") == 2
    versioned = (HISTORIES / "history-tools.json").read_text()
    assert json.dumps(agent_version(tools_agent)) not in versioned  # a marker, not JSON text
    assert "EVENT_TYPE_MARKER_RECORDED" in _kinds("history-tools.json")


def _decoded_result(name: str) -> RunResult:
    """The result a committed history's run completed with, decoded as a worker decodes it."""
    history = load_history(HISTORIES / name)
    done = history.events[-1].workflow_execution_completed_event_attributes.result.payloads
    (result,) = TowlinePayloadConverter().from_payloads(list(done), [RunResult])
    assert isinstance(result, RunResult)
    return result


def test_the_frontier_history_holds_thinking_images_and_native_output() -> None:
    """Recorded by issue 19's code: what its run wrote decodes back to the same parts."""
    result = _decoded_result("history-frontier.json")
    assert result.output == {"subject": "a dot", "images": 2, "note": ""}  # null: the default
    thinking = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.thinking]
    assert [(t.signature, t.provider) for t in thinking] == [
        ("sig-frontier-1", "anthropic"), ("sig-frontier-2", "anthropic")]
    prompt = result.messages[0].parts[0]
    assert isinstance(prompt, UserPart) and prompt.content[1] == BinaryContent(
        data=FRONTIER_PNG, media_type="image/png")
    (snapshot,) = [p for m in result.messages if isinstance(m, ModelRequest)
                   for p in m.parts if isinstance(p, ToolReturnPart)]
    assert media_in(snapshot.content) == (
        ["the snapshot"], [BinaryContent(data=FRONTIER_PNG, media_type="image/png")])
    # the model was asked for native output: the schema went with the request, no output tool
    scheduled = [e.activity_task_scheduled_event_attributes for e in
                 load_history(HISTORIES / "history-frontier.json").events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    first = json.loads(scheduled[0].input.payloads[0].data)
    definitions = first["chain"]["definitions"]
    assert definitions["output_mode"] == "native" and not definitions.get("output_tools")
    assert definitions["output_schema"]["required"] == ["subject", "images"]


@tool
def extra(x: int) -> int:
    """A tool the recorded run's agent did not have."""
    return x


async def test_a_run_of_another_agent_version_is_refused_unless_accepted() -> None:
    """The tools history, replayed by a worker whose `history-tools` has another tool."""
    changed = Agent(name="history-tools", instructions="Use the tools.",
                    tools=[lookup, flaky, extra],
                    model=FunctionModel(tools_script, model_name="history-tools-model"))
    history = load_history(HISTORIES / "history-tools.json")
    refused = await Replayer(workflows=[AgentRun], plugins=[TowlinePlugin([changed])]) \
        .replay_workflow(history, raise_on_replay_failure=False)
    assert "another version of agent 'history-tools'" in str(refused.replay_failure)
    accepting = TowlinePlugin([changed], accept_versions=[agent_version(tools_agent)])
    accepted = await Replayer(workflows=[AgentRun], plugins=[accepting]) \
        .replay_workflow(history, raise_on_replay_failure=False)
    assert accepted.replay_failure is None


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


def test_a_1_0_history_records_one_marker_the_agent_version() -> None:
    """The 1.0 engine records no engine marker: a session started as `start_run` starts it holds
    one marker, its agent's version, and the ledger's search attributes from the start request
    (upserted at status changes only)."""
    events = load_history(HISTORIES / "history-session.json").events
    assert patch_ids(events) == [version_patch(agent_version(tools_agent))]
    # status changes only: waiting (with the Int counters), then succeeded
    assert towline_upserts(events) == [
        {"TowlineStatus", "TowlineRunStep", "TowlineToolCalls", "TowlineTotalTokens"},
        {"TowlineStatus"}]


def test_every_committed_history_is_of_the_1_0_engine() -> None:
    """No committed history records an engine marker (`history_engine` reads `BASE`), so
    replaying them checks today's code against the 1.0 engine's commands."""
    for path in FILES:
        events = load_history(path).events
        assert history_engine(events) == BASE, path.name
        assert not [i for i in patch_ids(events) if i.startswith("towline-engine")], path.name


def test_the_routed_fork_and_reused_id_histories_hold_what_they_claim() -> None:
    """Issues 21-23's features (`tests/history_routed.py`), read back from the histories
    themselves: priorities and the routed model queue on the activities, the contributed state in the memo beside the counters (carried across
    continue-as-new), a fork's lineage, and a reused approved call id asked about again."""
    todo = [load_history(p).events for p in FILES if p.name.startswith("history-routed-todo.")]
    assert len(todo) >= 2, "the routed run continued as new"
    for events in todo:
        models = [e.activity_task_scheduled_event_attributes for e in events
                  if e.HasField("activity_task_scheduled_event_attributes")]
        assert models and all(
            (m.task_queue.name, m.priority.priority_key, m.priority.fairness_key)
            == ("towline-history-models", 2, "acme") for m in models)
    states = [json.loads(e.workflow_properties_modified_event_attributes.upserted_memo
                         .fields["towline.state"].data)
              for events in todo for e in events
              if e.HasField("workflow_properties_modified_event_attributes")
              and "towline.state" in e.workflow_properties_modified_event_attributes.upserted_memo.fields]
    assert [t["status"] for t in states[-1]["todos"]] == ["completed", "completed"]
    carried = todo[-1][0].workflow_execution_started_event_attributes.memo.fields
    assert "towline.state" in carried and "towline.counters" in carried

    fork = load_history(HISTORIES / "history-fork.json").events
    lineage = fork[0].workflow_execution_started_event_attributes.memo.fields["towline.forked_from"]
    assert json.loads(lineage.data) == {"run_id": "history-tools", "step": 1}

    approval = load_history(HISTORIES / "history-reused-id.json").events
    accepted = [e for e in approval if e.HasField("workflow_execution_update_accepted_event_attributes")]
    decided = [json.loads(e.workflow_execution_update_accepted_event_attributes.accepted_request
                          .input.args.payloads[0].data)["call_id"] for e in accepted]
    assert decided == ["p1", "p1"]  # the second `p1` waited for its own approval
    pays = [e for e in approval if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "towline.tool.pay"]
    assert len(pays) == 2
