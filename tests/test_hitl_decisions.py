"""Approval policies and decisions in real runs (engine 4): rules and predicates, calls that wait
together, edit and respond, decisions bound to a digest, remembered decisions, the run's policy
changed live, the audit trail in the history, and what a waiting run says it waits for."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from hitl_agents import desk, steps_prompt
from hitl_waits import waiting
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from towline.client import start_run
from towline.results import RunResult
from towline.review import (
    approve,
    decide,
    decision,
    edit,
    pending,
    pick,
    reject,
    respond,
    set_policy,
)
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision, Decision, Decisions, EditDecision

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def desk_worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, [desk]) as started:
        yield started


async def state(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    found: dict[str, Any] = await handle.query("state")
    return found


async def test_rules_predicates_and_the_default_decide_without_asking(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 5, "to": "a"}), ("note", {"text": "x"}),
                           ("lookup", {"q": "rates"}), ("delete", {"path": "/tmp/x"})])
    handle = await start_run(tc, desk, prompt, task_queue=queue)
    [asked] = await waiting(handle, 1)  # only `delete`: the default asks
    assert (asked.tool_name, asked.index, asked.kind) == ("delete", 1, "approval")
    await reject(handle, reason="not today", by="alice")
    result: RunResult = await handle.result()
    assert result.output == ("pay=succeeded:paid 5 to a; note=denied:notes are off today; "
                             "lookup=succeeded:found rates; delete=denied:rejected by a reviewer: "
                             "not today")
    trail = {e["tool"]: e for e in (await state(handle))["decisions"]}
    assert (trail["pay"]["decision"], trail["pay"]["source"]) == ("approved", "rule")
    assert (trail["note"]["decision"], trail["note"]["source"]) == ("denied", "rule")
    assert trail["note"]["reason"] == "notes are off today"
    assert (trail["delete"]["decision"], trail["delete"]["source"], trail["delete"]["by"]) == (
        "rejected", "person", "alice")
    assert trail["delete"]["digest"] == asked.digest and trail["delete"]["update_id"]


async def test_the_calls_of_one_response_wait_together_and_are_decided_some_at_a_time(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 200, "to": "bob"}), ("pay", {"amount": 300, "to": "eve"}),
                           ("ask_user", {"question": "which account?"})])
    handle = await start_run(tc, desk, prompt, task_queue=queue)
    calls = await waiting(handle, 3)  # all three at once, not one after another
    assert [c.index for c in calls] == [1, 2, 3]
    assert calls[2].decisions == ["respond", "reject"]
    bob, eve, question = calls
    entries = await decide(handle, [decision(bob, "edit", args={"amount": 150, "to": "bob"}),
                                    decision(question, "respond", result="savings")], by="alice")
    assert [e["decision"] for e in entries] == ["edited", "responded"]
    [left] = await waiting(handle, 1)
    assert left.call_id == eve.call_id
    assert (await state(handle))["waiting_for"] == "approval"
    await reject(handle, eve.call_id, reason="unknown payee")
    result: RunResult = await handle.result()
    assert result.output == ("pay=succeeded:paid 150 to bob; pay=denied:rejected by a reviewer: "
                             "unknown payee; ask_user=succeeded:savings")
    assert result.counters.tool_calls == 1  # only the edited payment ran; respond ran nothing
    edited = next(e for e in (await state(handle))["decisions"] if e["decision"] == "edited")
    assert edited["original_args"] == {"amount": 200, "to": "bob"}
    assert edited["args"] == {"amount": 150, "to": "bob"}


async def test_a_decision_is_bound_to_its_call_and_a_refused_one_changes_nothing(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 500, "to": "bob"}), ("ask_user", {"question": "ok?"})])
    handle = await start_run(tc, desk, prompt, task_queue=queue)
    pay_call, ask = await waiting(handle, 2)

    async def refused(name: str, arg: Any, says: str) -> None:
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await handle.execute_update(name, arg)
        assert says in str(e.value.cause), e.value.cause

    await refused("approve", ApprovalDecision(call_id=pay_call.call_id, digest="0" * 16),
                  "is not the call you decided")
    await refused("approve", ApprovalDecision(call_id="nope"), "no tool call 'nope' is waiting")
    await refused("edit", EditDecision(call_id=pay_call.call_id, args={"amount": "lots", "to": "b"}),
                  "the edited arguments")
    await refused("approve", ApprovalDecision(call_id=ask.call_id), "approve is not allowed")
    await refused("decide", Decisions(decisions=[  # one bad decision: none of the batch applies
        Decision(kind="approve", call_id=pay_call.call_id, digest=pay_call.digest),
        Decision(kind="respond", call_id=ask.call_id, result=7)]), "is not what 'ask_user' returns")
    assert len(await pending(handle)) == 2
    await approve(handle, pay_call.call_id)
    await refused("approve", ApprovalDecision(call_id=pay_call.call_id, digest=pay_call.digest),
                  "no tool call")  # re-sent: the approval was used up
    await respond(handle, None, "yes")  # the one call left: no id needed
    result: RunResult = await handle.result()
    assert result.output == "pay=succeeded:paid 500 to bob; ask_user=succeeded:yes"
    assert result.counters.tool_calls == 1


async def test_remembered_decisions_answer_later_calls_that_match(desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 200, "to": "a@x.com"})],
                          [("pay", {"amount": 300, "to": "b@x.com"})],
                          [("pay", {"amount": 400, "to": "c@other.com"})])
    handle = await start_run(tc, desk, prompt, task_queue=queue)
    await waiting(handle, 1)
    await approve(handle, "1", by="alice", remember="session", pattern={"to": "*@x.com"})
    [third] = await waiting(handle, 1)  # the second payment did not ask
    assert third.args["to"] == "c@other.com"
    remembered = (await state(handle))["remembered"]
    assert [(r["tool"], r["kind"], r["scope"], r["pattern"]) for r in remembered] == [
        ("pay", "approve", "session", {"to": "*@x.com"})]
    await edit(handle, third.call_id[:4], {"amount": 40, "to": "c@other.com"})
    result: RunResult = await handle.result()
    assert result.output == ("pay=succeeded:paid 200 to a@x.com; pay=succeeded:paid 300 to "
                             "b@x.com; pay=succeeded:paid 40 to c@other.com")
    sources = [(e["decision"], e["source"]) for e in (await state(handle))["decisions"]]
    assert sources == [("approved", "person"), ("approved", "remembered"), ("edited", "person")]


async def test_the_policy_changes_live_and_answers_calls_already_waiting(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 900, "to": "bob"})], [("delete", {"path": "/a"})])
    handle = await start_run(tc, desk, prompt, task_queue=queue)
    await waiting(handle, 1)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await set_policy(handle, {"launch": "approve"})
    assert "no tool 'launch' in this run" in str(refused.value.cause)
    policy = await set_policy(handle, {"pay": "approve", "delete": {"deny": "never delete"}},
                              by="ops", reason="incident 7")
    assert policy == {"rules": {"pay": "approve", "delete": {"deny": "never delete"}}, "default": None}
    result: RunResult = await handle.result()
    assert result.output == "pay=succeeded:paid 900 to bob; delete=denied:never delete"
    trail = (await state(handle))["decisions"]
    assert [(e["decision"], e["source"]) for e in trail] == [
        ("policy", "person"), ("approved", "policy"), ("denied", "policy")]
    assert trail[0]["by"] == "ops" and trail[0]["reason"] == "incident 7"


async def test_the_history_records_the_wait_and_the_trail(desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    handle = await start_run(tc, desk, steps_prompt([("delete", {"path": "/b"})]), task_queue=queue)
    [call] = await waiting(handle, 1)
    memo = await (await handle.describe()).memo()
    assert memo.get("towline.waiting") == "approval"
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert f"waiting for approval: #1 `delete` call {call.call_id}" in metadata.current_details
    assert pick([call], "#1") is call
    await approve(handle, by="bob")
    await handle.result()
    history = await handle.fetch_history()
    summaries = [e.user_metadata.summary.data.decode() for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert f'approval: delete(path="/b") · call {call.call_id}' in [json.loads(s) for s in summaries]
    memo = await (await handle.describe()).memo()
    assert "towline.waiting" not in memo
    trail = memo["towline.decisions"]
    assert trail["total"] == 1 and trail["entries"][0]["by"] == "bob"
