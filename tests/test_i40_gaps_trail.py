"""The audit trail's last gaps (issue 40, findings 2 and 7), in real runs.

Remembered decisions (their results and changed arguments included) are carried across
continue-as-new and shown by the `state` query, and were kept whole and without number; a
trail carried from an engine-4 execution into an engine-5 one was kept as it came, unbounded
(and its memo not rewritten); serve's answer when the Temporal service cannot take a decision
(503) and `towline watch`'s escaping of a decision's reason had no test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cli_helpers import cli_env, towline
from hitl_agents import desk, steps_prompt
from hitl_waits import eventually, stop, waiting
from ports import free_port
from temporalio import workflow
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from towline.client import start_run
from towline.devserver import start_dev_server
from towline.messages import ModelRequest, Usage, UserPart
from towline.results import Counters, ResumeState, RunInput, RunResult
from towline.review import approve, reject, respond
from towline.serve.app import ServeConfig, create_app
from towline.testing import towline_worker
from towline.workflows.audit_bounds import (
    MAX_ENTRY_BYTES,
    MAX_REMEMBERED_BYTES,
    MAX_TEXT_BYTES,
    REMEMBERED_KEEP,
    TRUNCATED,
    json_bytes,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

ORIGIN = "http://localhost:8765"
SAME = {"Host": "localhost:8765", "Origin": ORIGIN}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def desk_worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, [desk]) as started:
        yield started


async def test_remembered_decisions_are_bounded(desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    n = 20
    calls = [("pay", {"amount": 500 + i, "to": f"p{i}"}, f"pay_{i}") for i in range(n)]
    handle = await start_run(tc, desk, steps_prompt(calls, [("ask_user", {"question": "q"})]),
                             task_queue=queue, id=f"i40-gaps-{uuid.uuid4().hex[:8]}")
    try:
        waited = await waiting(handle, n)
        reason = "because " * 2_000  # 16,000 characters: a reason the validators take
        for call in waited:
            await approve(handle, call.call_id, by="ann", reason=reason, remember="session",
                          pattern={"to": call.args["to"]})
        [question] = await waiting(handle, 1)
        # a remembered answer is used whole later: one too large is refused, not cut
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await respond(handle, question.call_id, "savings " * 6_000, remember="session")
        said = str(refused.value.cause)
        assert "cannot be remembered" in said and f"{MAX_ENTRY_BYTES:,}" in said, said
        await respond(handle, question.call_id, "savings", remember="session")
        result: RunResult = await asyncio.wait_for(handle.result(), 120)
        assert result.output.count("pay=succeeded") == n
        remembered: list[dict[str, Any]] = (await handle.query("state"))["remembered"]
        assert json_bytes(remembered) <= MAX_REMEMBERED_BYTES
        assert 1 < len(remembered) < n  # the newest that fit: the older are forgotten
        assert remembered[-1] == {**remembered[-1], "tool": "ask_user", "result": "savings"}
        kept = [r["call_id"] for r in remembered[:-1]]
        assert kept == [c.call_id for c in waited[n - len(kept):]]
    finally:
        await stop(handle)


@workflow.defn(name="I40Carrier", sandboxed=False)
class Carrier:
    """An execution that continues as new into an `AgentRun` with the input (and memo) an
    engine-4 execution would have carried: the only way a run gets a `resume`."""

    @workflow.run
    async def run(self, carried: dict[str, Any], memo: dict[str, Any], queue: str) -> None:
        workflow.continue_as_new(args=[carried], workflow="AgentRun", task_queue=queue, memo=memo)


async def test_a_trail_carried_from_engine_4_is_bounded_when_engine_5_starts(
        desk_worker: tuple[Client, str]) -> None:
    """An engine-4 execution continued as new carried its trail and remembered decisions
    whole (`ResumeState.approvals`, exactly as engine 4's `approvals.carried` writes it): the
    engine-5 execution it continues as bounds them as it starts."""
    tc, queue = desk_worker
    workflow_id = f"i40-carried-{uuid.uuid4().hex[:8]}"
    big = "z" * 100_000
    audit = [{"call_id": f"old_{i}", "tool": "ask_user", "step": 1, "decision": "responded",
              "source": "person", "by": "b" * 5_000, "reason": big, "result": big,
              "at": "2026-01-01T00:00:00+00:00"} for i in range(3)]
    remembered = [{"tool": "pay", "pattern": {"to": f"p{i}"}, "kind": "approve",
                   "scope": "session", "call_id": f"r{i}", "at": "2026-01-01T00:00:00+00:00"}
                  for i in range(REMEMBERED_KEEP + 50)]
    remembered.append({"tool": "ask_user", "kind": "respond", "scope": "session", "result": big,
                       "call_id": "huge", "at": "2026-01-01T00:00:00+00:00"})
    prompt = steps_prompt([("delete", {"path": "/carried"})])
    resume = ResumeState(
        messages=[ModelRequest(parts=[UserPart(content=prompt)])], state={},
        counters=Counters.starting(desk.limits, None), usage=Usage(), root_run_id=workflow_id,
        approvals={"policy": {}, "remembered": remembered, "audit": audit, "audit_total": 3,
                   "approval_seq": 3})
    carried = RunInput(agent=desk.name, resume=resume).model_dump(mode="json")
    memo = {"towline.decisions": {"total": 3, "entries": audit}}  # as the start request copies it
    async with Worker(tc, task_queue=f"{queue}-carrier", workflows=[Carrier],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        await tc.start_workflow(Carrier.run, args=[carried, memo, queue], id=workflow_id,
                                task_queue=f"{queue}-carrier")
        handle = tc.get_workflow_handle(workflow_id, result_type=RunResult)

        async def continued() -> bool:
            return (await handle.describe()).workflow_type == "AgentRun"
        await eventually(continued, "the run continued as new")
        await waiting(handle, 1)  # the continued execution: an AgentRun on the desk's worker
    try:
        state = await handle.query("state")
        for entry in state["decisions"]:
            assert json_bytes(entry) <= MAX_ENTRY_BYTES, json_bytes(entry)
            assert entry["result"][TRUNCATED] == json_bytes(big)
            assert json_bytes(entry["by"]) <= MAX_TEXT_BYTES
        assert [e["call_id"] for e in state["decisions"]] == ["old_0", "old_1", "old_2"]
        kept = [r["call_id"] for r in state["remembered"]]  # the newest, the oversized dropped
        assert kept == [f"r{i}" for i in range(50, REMEMBERED_KEEP + 50)]

        async def memo_bounded() -> bool:  # the memo is rewritten bounded, not left as carried
            memo = await (await handle.describe()).memo()
            trail = memo.get("towline.decisions")
            return trail is not None and len(trail["entries"]) == 3 and all(
                json_bytes(e) <= MAX_ENTRY_BYTES for e in trail["entries"])
        await eventually(memo_bounded, "the bounded trail in the memo")
        await approve(handle, by="ann")
        await asyncio.wait_for(handle.result(), 120)
        memo = await (await handle.describe()).memo()
        assert memo["towline.decisions"]["total"] == 4
    finally:
        await stop(handle)


async def test_serve_answers_503_when_the_temporal_service_cannot_take_a_decision() -> None:
    """The Temporal service serve is connected to goes away: a decision is answered 503
    "try again", with none of the transport's raw text (not a 500)."""
    service = await start_dev_server(db_path=None, ui=False, port=free_port())
    app = create_app(ServeConfig(client=service.client, agents=[desk], task_queue="none"))
    await service.shutdown()  # the connection serve holds now reaches no one
    transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN, timeout=90) as http:
        answer = await http.post("/runs/some-run/approvals/call_1", headers=SAME,
                                 json={"decision": "approve", "by": "ann"})
    assert answer.status_code == 503, answer.text[:300]
    said = answer.json()["error"]
    assert "could not take the decision now" in said and "try again" in said, said
    assert "tcp" not in said.lower() and "transport" not in said.lower(), said


async def test_watch_escapes_a_decision_reason(desk_worker: tuple[Client, str], target: str) -> None:
    tc, queue = desk_worker
    handle = await start_run(tc, desk, steps_prompt([("delete", {"path": "/w"})]),
                             task_queue=queue, id=f"i40-watch-{uuid.uuid4().hex[:8]}")
    try:
        [call] = await waiting(handle, 1)
        await reject(handle, call.call_id, by="ann",
                     reason="\x1b[2Jwiped\ncall fake approved: all good")
        await asyncio.wait_for(handle.result(), 120)
        watched = await towline("watch", handle.id, env=cli_env(target))
        assert watched.code == 0, watched
        [line] = [row for row in watched.out.splitlines()
                  if row.startswith(f"call {call.call_id} ")]
        assert line.endswith(": \\x1b[2Jwiped\\ncall fake approved: all good"), line
        assert "\x1b[2J" not in watched.out, watched.out
        rows = watched.out.splitlines()  # the decision's line is whole: the next is the tool's
        assert rows[rows.index(line) + 1].startswith("[step 1]   delete -> "), watched.out
    finally:
        await stop(handle)
