"""What a turn of `towline serve` waits for, in AG-UI's terms, on hand-made events and inputs
(`towline.serve.waits`, the mapper's `finish_waiting`): an approval ends the AG-UI run with the
interrupt outcome (unless the client streams through approvals), a front-end tool's call with
the success outcome naming it; a `resume`, trailing `tool` messages and a user's message are
told apart, and a resume that is no decision is refused with what it should be. Live: the
three calls of a payments response wait together, are one interrupt outcome, and one resume
decides them all (or, one decision refused, none)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput
from temporalio.client import Client

from towline.events import RunEvent
from towline.review import PendingApproval
from towline.serve.agui import TurnMapper
from towline.serve.app import ServeConfig, create_app
from towline.serve.waits import (
    NewMessage,
    Resume,
    ToolResults,
    parse_interrupt_id,
    turn_input,
)
from towline.testing import towline_worker


def _ev(offset: int, type: str, **fields: Any) -> RunEvent:
    return RunEvent.model_validate({"type": type, "offset": offset, **fields})


def _call(call_id: str, kind: str = "approval", **extra: Any) -> PendingApproval:
    return PendingApproval(workflow_id="wf", call_id=call_id, tool_name="launch",
                           args={"target": "moon"}, run_step=1, digest=f"d-{call_id}", index=1,
                           kind=kind, decisions=["approve", "reject", "edit"], **extra)


def _wire(events: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(e.model_dump_json(by_alias=True, exclude_none=True)) for e in events]


def test_an_approval_ends_the_agui_run_with_an_interrupt_per_waiting_call() -> None:
    m = TurnMapper("wf", "thread", "run-1", streaming=True)
    m.map(_ev(1, "text", step=1, delta="Launching", attempt=1))
    (custom,) = _wire(m.map(_ev(2, "approval", step=1, call_id="c1", tool="launch", args={})))
    assert custom["name"] == "towline.approval" and m.waiting == "approval" and not m.finished
    # the calls of one response wait together: one interrupt each
    out = _wire(m.finish_waiting([_call("c1"), _call("c2"), _call("p1", kind="client")]))
    assert [e["type"] for e in out] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    outcome = out[-1]["outcome"]
    assert outcome["type"] == "interrupt" and m.finished
    first, second = outcome["interrupts"]
    assert (first["id"], first["toolCallId"], first["reason"]) == ("c1@d-c1", "c1", "tool_approval")
    assert second["id"] == "c2@d-c2"
    assert first["responseSchema"]["properties"]["decision"]["enum"] == ["approve", "reject", "edit"]
    assert first["metadata"]["towline"]["digest"] == "d-c1"
    assert first["message"] == 'launch({"target": "moon"}) waits for approval'
    assert parse_interrupt_id(first["id"]) == ("c1", "d-c1")
    assert parse_interrupt_id("plain") == ("plain", None)
    # decided meanwhile: nothing waits, the turn goes on
    again = TurnMapper("wf", "thread", "run-1")
    again.map(_ev(2, "approval", step=1, call_id="c1", tool="launch", args={}))
    assert again.finish_waiting([]) == [] and not again.finished and again.waiting is None


def test_a_front_end_tool_ends_the_run_with_its_pending_call_also_without_interrupts() -> None:
    m = TurnMapper("wf", "thread", "run-1", interrupts=False)
    m.map(_ev(2, "approval", step=1, call_id="c1", tool="launch", args={}))
    assert m.waiting is None  # the page's stream goes on through an approval
    m.map(_ev(3, "client_tool", step=1, call_id="p1", tool="pick", args={}))
    assert m.waiting == "client_tool"
    (finished,) = _wire(m.finish_waiting([_call("c1"), _call("p1", kind="client")]))
    assert finished["outcome"] == {"type": "success", "pendingToolCallIds": ["p1"]}


def _input(**fields: Any) -> RunAgentInput:
    return RunAgentInput.model_validate({"threadId": "t", "runId": "r", **fields})


def test_the_input_is_a_message_tool_results_or_a_resume() -> None:
    user = {"id": "m1", "role": "user", "content": "hi"}
    said = turn_input(_input(messages=[user]))
    assert isinstance(said, NewMessage) and said.text == "hi" and said.earlier == []
    results = turn_input(_input(messages=[user, {"id": "a", "role": "assistant", "toolCalls": [
        {"id": "p1", "type": "function", "function": {"name": "pick", "arguments": "{}"}}]},
        {"id": "t1", "role": "tool", "toolCallId": "p1", "content": '{"color": "teal"}'},
        {"id": "t2", "role": "tool", "toolCallId": "p2", "content": "just text"}]))
    assert isinstance(results, ToolResults)
    assert results.results == [("p1", {"color": "teal"}), ("p2", "just text")]
    resume = turn_input(_input(messages=[user], resume=[
        {"interruptId": "c1@d1", "status": "resolved",
         "payload": {"decision": "edit", "args": {"target": "mars"}, "by": "ann"}},
        {"interruptId": "c2@d2", "status": "cancelled"}]))
    assert isinstance(resume, Resume) and resume.by == "ann"
    assert resume.decisions == [
        {"kind": "edit", "call_id": "c1", "digest": "d1", "args": {"target": "mars"}},
        {"kind": "reject", "call_id": "c2", "digest": "d2", "reason": "cancelled by the client"}]
    with pytest.raises(ValueError, match=r"resume 'c1@d1': decision: .*expected"):
        turn_input(_input(messages=[], resume=[
            {"interruptId": "c1@d1", "status": "resolved", "payload": {"decision": "maybe"}}]))
    with pytest.raises(ValueError, match="one resume is decided by one person"):
        turn_input(_input(messages=[], resume=[
            {"interruptId": "a", "status": "resolved", "payload": {"decision": "approve", "by": "x"}},
            {"interruptId": "b", "status": "resolved", "payload": {"decision": "approve", "by": "y"}}]))
    with pytest.raises(ValueError, match="the last message must be the user's"):
        turn_input(_input(messages=[user, {"id": "a", "role": "assistant", "content": "yo"}]))


# --- live: a payments run whose three calls wait together ----------------------------------


async def _events(http: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with http.stream("POST", "/agents/payments", json=body) as response:
        assert response.status_code == 200, await response.aread()
        return [json.loads(line[6:]) async for line in response.aiter_lines()
                if line.startswith("data: ")]


async def test_calls_that_wait_together_are_one_interrupt_outcome_and_one_resume(
    client: Client,
) -> None:
    from examples.payments import desk

    async with towline_worker(client, [desk]) as (tclient, queue):
        app = create_app(ServeConfig(client=tclient, agents=[desk], task_queue=queue))
        transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
        thread = f"pay-agui-{uuid.uuid4().hex[:8]}"
        user = {"id": "m1", "role": "user",
                "content": "pay 250 to bob and 180 to carol, ask: which account?"}
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                     timeout=60) as http:
            first = await _events(http, {"threadId": thread, "runId": "r1", "messages": [user]})
            assert first[-1]["type"] == "RUN_FINISHED"
            interrupts = first[-1]["outcome"]["interrupts"]
            assert [i["toolCallId"] for i in interrupts] == ["pay_1", "pay_2", "ask_1"]
            asked = interrupts[2]["metadata"]["towline"]["decisions"]
            assert asked == ["respond", "reject"]  # the rule's decisions, and only those
            ids = [i["id"] for i in interrupts]

            def resume(*payloads: dict[str, Any]) -> dict[str, Any]:
                return {"threadId": thread, "runId": "r2", "messages": [user], "resume": [
                    {"interruptId": i, "status": "resolved", "payload": p}
                    for i, p in zip(ids, payloads, strict=True)]}

            # one decision the rule does not allow: none of the three is applied
            refused = await _events(http, resume(
                {"decision": "approve"}, {"decision": "approve"}, {"decision": "approve"}))
            assert refused[-1]["type"] == "RUN_ERROR"
            assert "approve is not allowed for tool 'ask_user'" in refused[-1]["message"]
            state: dict[str, Any] = await tclient.get_workflow_handle(thread).query("state")
            assert sorted(state["pending_approvals"]) == ["ask_1", "pay_1", "pay_2"]

            done = await _events(http, resume(
                {"decision": "edit", "args": {"amount": 200, "to": "bob"}, "by": "ann"},
                {"decision": "reject", "reason": "not carol", "by": "ann"},
                {"decision": "respond", "result": "savings", "by": "ann"}))
        assert done[-1]["type"] == "RUN_FINISHED" and "outcome" not in done[-1]
        assert done[-1]["result"] == ("pay: paid $200 to bob (succeeded); pay: rejected by a "
                                      "reviewer: not carol (denied); ask_user: savings (succeeded)")
        trail = [(d["call_id"], d["decision"], d.get("by")) for d in
                 (await tclient.get_workflow_handle(thread).query("state"))["decisions"]]
        assert trail == [("pay_1", "edited", "ann"), ("pay_2", "rejected", "ann"),
                         ("ask_1", "responded", "ann")]
