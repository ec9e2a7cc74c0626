"""An approved call executes at most once: across a worker SIGKILLed after the approval and
before, during and after the approved call, a re-sent decision, continue-as-new and a reset.

Executions are counted twice: from the tool's own record (`pay` appends a line per execution
to `$HITL_LEDGER`) and from the history (the activities the run scheduled, and the attempt
that completed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import pytest_asyncio
from durable_agents import WorkerProcess
from hitl_agents import CRASH_DURING_ENV, CRASH_MODEL_ENV, LEDGER_ENV, exact_desk, steps_prompt
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from towline.client import run_error, start_run
from towline.results import RunInput, RunResult
from towline.review import PendingApproval, approve, pending
from towline.runtime.plugin import TowlinePlugin
from towline.testing import towline_worker
from towline.timetravel.travel import reset
from towline.workflows import ApprovalDecision

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return path


def spawn(workers: list[WorkerProcess], target: str, namespace: str, queue: str, root: Path,
          die_before: str | None = None) -> WorkerProcess:
    w = WorkerProcess(target, queue, root, namespace, die_before=die_before,
                      agents="hitl_agents:AGENTS")
    w.start()
    workers.append(w)
    return w


def executions(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


async def pay_activities(handle: WorkflowHandle[Any, Any]) -> tuple[int, list[int]]:
    """How many `pay` activities the run scheduled, and the attempt each completed on."""
    history = await handle.fetch_history()
    scheduled = {e.event_id for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name == "towline.tool.pay"}
    attempts = [e.activity_task_started_event_attributes.attempt for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and e.activity_task_started_event_attributes.scheduled_event_id in scheduled]
    return len(scheduled), attempts


async def waiting_call(handle: WorkflowHandle[Any, Any], tool: str = "pay") -> PendingApproval:
    for _ in range(600):
        try:
            calls = [c for c in await pending(handle) if c.tool_name == tool]
        except Exception:  # noqa: BLE001 - no worker answers the query yet (a restart)
            calls = []
        if calls:
            return calls[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {tool} call became pending")


async def resend_is_refused(handle: WorkflowHandle[Any, Any], call: PendingApproval) -> None:
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("approve", ApprovalDecision(call_id=call.call_id, digest=call.digest))
    assert f"no tool call {call.call_id!r} is waiting" in str(refused.value.cause)


TWO_STEPS = steps_prompt([("pay", {"amount": 500, "to": "bob"})], [("delete", {"path": "/tmp/x"})])
"""A payment to approve, then a call that waits again (so the run is live to re-send to)."""


async def test_killed_after_the_approval_before_the_call_runs_it_once(
        tclient: Client, target: str, namespace: str, tmp_path: Path, ledger: Path,
        workers: list[WorkerProcess]) -> None:
    queue = f"hitl-before-{uuid4().hex[:8]}"
    first = spawn(workers, target, namespace, queue, tmp_path, die_before="towline.tool.pay")
    handle = await start_run(tclient, exact_desk, TWO_STEPS, task_queue=queue)
    call = await waiting_call(handle)
    await approve(handle, call.call_id, by="alice")  # the worker dies as the call's attempt begins
    assert first.wait() != 0
    spawn(workers, target, namespace, queue, tmp_path)
    await waiting_call(handle, "delete")
    await resend_is_refused(handle, call)
    await approve(handle)
    result: RunResult = await handle.result()
    assert result.output.startswith("pay=succeeded:paid 500 to bob")
    assert executions(ledger) == 1
    scheduled, attempts = await pay_activities(handle)
    assert scheduled == 1 and attempts == [2]  # the first attempt never entered the tool


async def test_killed_during_the_approved_call_ends_unknown_and_never_runs_it_again(
        tclient: Client, target: str, namespace: str, tmp_path: Path, ledger: Path,
        workers: list[WorkerProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "crash-during"
    marker.touch()
    monkeypatch.setenv(CRASH_DURING_ENV, str(marker))
    queue = f"hitl-during-{uuid4().hex[:8]}"
    first = spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, exact_desk, TWO_STEPS, task_queue=queue)
    call = await waiting_call(handle)
    await approve(handle, call.call_id)
    assert first.wait() != 0 and not marker.exists()
    spawn(workers, target, namespace, queue, tmp_path)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    err = run_error(failed.value)
    assert err.reason == "UncertainToolEffect"
    assert err.partial is not None
    [ret] = [p for m in err.partial.messages for p in getattr(m, "parts", [])
             if getattr(p, "part_kind", "") == "tool_return"]
    assert ret.status == "unknown"
    assert executions(ledger) == 1
    # the second attempt found the first's entry mark and refused to run the tool again
    assert await pay_activities(handle) == (1, [2])


async def test_killed_after_the_approved_call_does_not_run_it_again(
        tclient: Client, target: str, namespace: str, tmp_path: Path, ledger: Path,
        workers: list[WorkerProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "crash-model"
    marker.touch()
    monkeypatch.setenv(CRASH_MODEL_ENV, str(marker))
    queue = f"hitl-after-{uuid4().hex[:8]}"
    first = spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, exact_desk, TWO_STEPS, task_queue=queue)
    call = await waiting_call(handle)
    await approve(handle, call.call_id)  # pay runs; the next model request kills the worker
    assert first.wait() != 0 and not marker.exists()
    spawn(workers, target, namespace, queue, tmp_path)
    await waiting_call(handle, "delete")
    await resend_is_refused(handle, call)
    await approve(handle)
    result: RunResult = await handle.result()
    assert result.output.startswith("pay=succeeded:paid 500 to bob")
    assert executions(ledger) == 1
    assert await pay_activities(handle) == (1, [1])


async def test_remembered_decisions_and_the_trail_cross_continue_as_new_and_a_resend_is_refused(
        client: Client, ledger: Path) -> None:
    prompt = steps_prompt([("pay", {"amount": 500, "to": "bob"})],
                          *([("delete", {"path": f"/tmp/{i}"})] for i in range(3)),
                          [("pay", {"amount": 700, "to": "bob"})])
    async with towline_worker(client, [exact_desk]) as (tc, queue):
        handle = await tc.start_workflow(
            "AgentRun", RunInput(agent=exact_desk.name, prompt=prompt, continue_as_new_after_events=25),
            id=f"hitl-can-{uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
        first = await waiting_call(handle)
        await approve(handle, first.call_id, remember="run", pattern={"to": "bob"})
        for _ in range(3):
            await approve(handle, (await waiting_call(handle, "delete")).call_id, remember=None)
        result: RunResult = await handle.result()
        desc = await handle.describe()
        assert desc.raw_description.workflow_execution_info.first_run_id != desc.run_id  # continued
        memo = await desc.memo()
    assert result.output.count("pay=succeeded") == 2 and executions(ledger) == 2
    trail = memo["towline.decisions"]
    assert trail["total"] == 5
    assert [e["source"] for e in trail["entries"]][-1] == "remembered"


async def test_a_reset_asks_again_and_the_old_decision_is_refused(client: Client, ledger: Path) -> None:
    async with towline_worker(client, [exact_desk]) as (tc, queue):
        handle = await start_run(tc, exact_desk, steps_prompt([("pay", {"amount": 500, "to": "bob"})]),
                                 task_queue=queue)
        call = await waiting_call(handle)
        await approve(handle, call.call_id)
        await handle.result()
        assert executions(ledger) == 1
        await reset(tc, handle.id, to_step=1, force=True)
        latest = tc.get_workflow_handle(handle.id)
        again = await waiting_call(latest)
        assert again.call_id == call.call_id and again.digest != call.digest
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await latest.execute_update("approve", ApprovalDecision(call_id=call.call_id,
                                                                    digest=call.digest))
        assert "is not the call you decided" in str(refused.value.cause)
        assert executions(ledger) == 1
        assert json.loads(ledger.read_text())["amount"] == 500
        await latest.terminate(reason="test over")
