"""ToolApproval in real runs: the run waits durably for a human decision on listed tools."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, tool
from towline.capabilities import ToolApproval
from towline.client import start_run
from towline.errors import ConfigurationError
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision

executed: list[int] = []


@tool
def transfer(amount: int) -> str:
    """Move money (needs approval)."""
    executed.append(amount)
    return f"moved {amount}"


@tool
def balance() -> int:
    """Read the balance (no approval needed)."""
    return 100


def banker(name: str, seen: list[list[Message]]) -> FunctionModel:
    """Step 1 checks the balance and transfers; step 2 answers with what it was told."""

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(messages)
        if len(seen) == 1:
            return ModelResponse(parts=[
                ToolCallPart(tool_name="balance", tool_call_id="b1"),
                ToolCallPart(tool_name="transfer", args={"amount": 7}, tool_call_id="t1"),
            ])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        return "; ".join(f"{p.tool_name}={p.status}:{p.content}" for p in last.parts
                         if isinstance(p, ToolReturnPart))

    return FunctionModel(answer, model_name=name)


def approval_agent(name: str, seen: list[list[Message]],
                   timeout: timedelta | None = None) -> Agent:
    return Agent(name=name, model=banker(f"{name}-model", seen), tools=[transfer, balance],
                 capabilities=[ToolApproval(tools=["transfer"], timeout=timeout)])


async def eventually(probe: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll `probe` until it returns something truthy (bounded: no timing assertions)."""
    for _ in range(200):
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"never observed: {what}")


async def pending(handle: WorkflowHandle[Any, RunResult]) -> dict[str, Any]:
    state: dict[str, Any] = await handle.query("state")
    return state.get("pending_approvals") or {}


async def status_attribute_is(client: Client, workflow_id: str, status: str) -> bool:
    query = f'WorkflowId = "{workflow_id}" AND TowlineStatus = "{status}"'
    return any([w async for w in client.list_workflows(query)])


async def test_approval_survives_a_worker_restart_and_validates_decisions(client: Client) -> None:
    seen: list[list[Message]] = []
    agent = approval_agent("approval-restart", seen)
    queue, workflow_id = f"tq-{uuid4().hex[:12]}", f"approval-{uuid4().hex[:12]}"
    executed.clear()

    async with towline_worker(client, [agent], task_queue=queue) as (tc, _):
        handle = await start_run(tc, agent, "pay 7", task_queue=queue, id=workflow_id)
        waiting = await eventually(lambda: pending(handle), "a pending approval")
        requested_at = datetime.fromisoformat(waiting["t1"].pop("requested_at"))
        digest = waiting["t1"].pop("digest")
        assert len(digest) == 16 and int(digest, 16) >= 0
        assert waiting == {"t1": {"call_id": "t1", "workflow_id": workflow_id,
                                  "tool_name": "transfer", "args": {"amount": 7}, "run_step": 1,
                                  "index": 1, "kind": "approval",
                                  "decisions": ["approve", "reject", "edit", "respond"],
                                  "expires_at": None, "metadata": None}}
        started = (await handle.describe()).start_time
        assert started is not None and started <= requested_at  # workflow time, tz-aware
        state = await handle.query("state")
        assert state["status"] == "waiting"
        await eventually(lambda: status_attribute_is(client, workflow_id, "waiting"),
                         "TowlineStatus = waiting")
        assert executed == []
    # the worker is gone; the run waits in Temporal, not in a process

    async with towline_worker(client, [agent], task_queue=queue) as (tc, _):
        handle = tc.get_workflow_handle(workflow_id, result_type=RunResult)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("approve", ApprovalDecision(call_id="nope"))
        assert await handle.execute_update("approve", ApprovalDecision(call_id="t1")) == "approved"
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("reject", ApprovalDecision(call_id="t1"))
        result = await handle.result()

    assert executed == [7]
    assert result.output == "balance=succeeded:100; transfer=succeeded:moved 7"
    assert result.counters.tool_calls == 2
    # visibility (search attributes) is eventually consistent: poll, bounded
    await eventually(lambda: status_attribute_is(client, workflow_id, "succeeded"),
                     "TowlineStatus = succeeded")


async def test_rejection_records_denied_and_the_model_is_told(client: Client) -> None:
    seen: list[list[Message]] = []
    agent = approval_agent("approval-reject", seen)
    executed.clear()
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "pay 7", task_queue=queue)
        await eventually(lambda: pending(handle), "a pending approval")
        decision = ApprovalDecision(call_id="t1", reason="too much today")
        assert await handle.execute_update("reject", decision) == "rejected"
        result = await handle.result()
        final_state = await handle.query("state")

    assert executed == []
    assert result.output == ("balance=succeeded:100; "
                             "transfer=denied:rejected by a reviewer: too much today")
    assert final_state["pending_approvals"] == {} and final_state["status"] == "succeeded"
    assert result.counters.tool_calls == 1  # only balance ran


async def test_no_decision_within_the_timeout_rejects(client: Client) -> None:
    seen: list[list[Message]] = []
    agent = approval_agent("approval-timeout", seen, timeout=timedelta(milliseconds=300))
    executed.clear()
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "pay 7", task_queue=queue)
        result = await handle.result()

    assert executed == []
    assert result.output.startswith("balance=succeeded:100; transfer=denied:not approved")
    assert len(seen) == 2


def test_configuration_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        ToolApproval(tools=[])
    with pytest.raises(ConfigurationError):
        ToolApproval(tools="transfer")
    with pytest.raises(ConfigurationError):
        ToolApproval(tools=["transfer"], timeout=timedelta(0))


def two_transfers(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[
            ToolCallPart(tool_name="transfer", args={"amount": 1}, tool_call_id="x1"),
            ToolCallPart(tool_name="transfer", args={"amount": 2}, tool_call_id="x2"),
        ])
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return ",".join(f"{p.tool_call_id}={p.status}" for p in last.parts
                    if isinstance(p, ToolReturnPart))


async def test_calls_of_one_response_wait_for_approval_side_by_side(client: Client) -> None:
    """Both calls are pending at once and can be decided in any order."""
    executed.clear()
    agent = Agent(name=f"approve-both-{uuid4().hex[:6]}",
                  model=FunctionModel(two_transfers, model_name="two-transfers"),
                  tools=[transfer], capabilities=[ToolApproval(tools=["transfer"])])
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "pay twice", task_queue=queue)
        waiting = await eventually(
            lambda: _both_pending(handle), "both transfers waiting for approval at once"
        )
        assert sorted(waiting) == ["x1", "x2"]
        await handle.execute_update("reject", ApprovalDecision(call_id="x2", reason="no"))
        await handle.execute_update("approve", ApprovalDecision(call_id="x1"))
        result = await handle.result()
    assert result.output == "x1=succeeded,x2=denied"
    assert executed == [1]


async def _both_pending(handle: WorkflowHandle[Any, RunResult]) -> list[str]:
    found = await pending(handle)
    return list(found) if len(found) == 2 else []


async def test_a_later_call_reusing_an_approved_id_asks_again(client: Client) -> None:
    """An approval is for one call: a model that numbers its calls afresh every step (as some
    offline and OpenAI-compatible servers do) gets no free pass for the second `t1`."""
    steps: list[int] = []

    def reuse(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        steps.append(len(steps))
        if len(steps) <= 2:  # two steps, each transferring with call id "t1"
            return ModelResponse(parts=[
                ToolCallPart(tool_name="transfer", args={"amount": len(steps)}, tool_call_id="t1")])
        return "done"

    agent = Agent(name="approval-reused-id", model=FunctionModel(reuse, model_name="reuse"),
                  tools=[transfer], capabilities=[ToolApproval(tools=["transfer"])])
    executed.clear()
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "pay twice", task_queue=queue)
        await eventually(lambda: pending(handle), "the first approval")
        await handle.execute_update("approve", ApprovalDecision(call_id="t1"))
        second = await eventually(
            lambda: _step_waiting(handle, 2), "the second call waiting for its own approval")
        assert second["args"] == {"amount": 2} and executed == [1]
        await handle.execute_update("reject", ApprovalDecision(call_id="t1", reason="once is enough"))
        result = await handle.result()

    assert executed == [1]  # the second transfer never ran
    assert result.output == "done"


async def _step_waiting(handle: WorkflowHandle[Any, RunResult], step: int) -> dict[str, Any] | None:
    waiting = (await pending(handle)).get("t1")
    return waiting if waiting and waiting["run_step"] == step else None
