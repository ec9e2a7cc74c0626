"""Issue 41, the typed client: `towline.client.RunHandle` answers with the workflow's own models,
and `towline run` follows the run's event stream instead of polling its queries."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from readme import REPO
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import (
    HandleQueryInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from examples.calculator import agents
from tests.cli_helpers import towline
from towline.client import RunHandle, run_handle, start_run
from towline.events import EventType, RunEvent
from towline.results import PendingApproval, RunResult, RunStatus, StateQueryResult
from towline.testing import towline_worker
from towline.workflows.decisions import ApprovalDecision


async def test_the_handle_returns_the_workflows_own_models(client: Client) -> None:
    async with towline_worker(client, agents) as (tc, queue):
        started = await start_run(tc, "careful-calculator", "What is 6 times 7?", task_queue=queue)
        run = run_handle(tc, started.id)
        state = await run.state()
        while not state.pending_approvals:
            await asyncio.sleep(0.1)
            state = await run.state()
        assert isinstance(state, StateQueryResult)
        assert state.status is RunStatus.WAITING and state.waiting_for == "approval"
        [call] = await run.pending()
        assert isinstance(call, PendingApproval)
        assert (call.workflow_id, call.tool_name, call.args) == (run.id, "multiply",
                                                                 {"a": 6, "b": 7})
        assert call.index == 1 and call.digest and call.requested_at is not None
        assert state.pending_approvals == {call.call_id: call}

        told = await run.approve(ApprovalDecision(call_id=call.call_id, digest=call.digest))
        assert told == "approved"
        seen = [e async for e in run.events()]
        assert all(isinstance(e, RunEvent) for e in seen)
        assert [e.type for e in seen][-1] == EventType.RESULT
        assert EventType.APPROVAL in [e.type for e in seen]
        result = await run.result()
        assert isinstance(result, RunResult) and result.output == "6 times 7 is 42."
        done = await RunHandle(started).state()
        assert done.status is RunStatus.SUCCEEDED and done.pending_approvals == {}
        assert [d["decision"] for d in done.decisions] == ["approved"]


class _CountQueries(Interceptor):
    """Counts the `state` and `messages` queries the worker answers."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        asked = self.asked

        class Inbound(WorkflowInboundInterceptor):
            def handle_query(self, input: HandleQueryInput) -> Any:
                if input.query in ("state", "messages"):
                    asked.append(input.query)
                return super().handle_query(input)

        return Inbound


async def test_towline_run_follows_the_event_stream_without_polling_queries(
    client: Client, target: str, namespace: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TOWLINE_"))}
    env.update(TEMPORAL_ADDRESS=target, TEMPORAL_NAMESPACE=namespace,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    wid = f"i41-follow-{uuid.uuid4().hex[:8]}"
    counter = _CountQueries()
    async with towline_worker(client, agents, interceptors=[counter]) as (tc, queue):
        proc = asyncio.ensure_future(towline(
            "run", "examples.calculator:careful_agent", "What is 6 times 7?", "--id", wid,
            "--no-worker", "--no-stream", "--task-queue", queue, env=env))
        run = run_handle(tc, wid)
        mine = 0  # the `state` queries this test makes
        pending: list[PendingApproval] = []
        while not pending:  # the run waits for the approval while `towline run` follows it
            await asyncio.sleep(0.3)
            try:
                pending = await run.pending()
            except RPCError:  # not started yet: no worker was asked
                continue
            mine += 1
        await asyncio.sleep(1.5)  # `towline run` follows the waiting run
        await run.approve(ApprovalDecision(call_id=pending[0].call_id, digest=pending[0].digest))
        done = await proc
    assert done.code == 0, done
    assert counter.asked == ["state"] * mine, counter.asked  # none of them from `towline run`
    assert done.out == "6 times 7 is 42.\n"
    assert "[step 1] model calls multiply(a=6.0, b=7.0)" in done.err, done.err
    assert f"waiting for approval: multiply(a=6.0, b=7.0)  (call id {pending[0].call_id})" \
        in done.err, done.err
    assert "resumed" in done.err.splitlines(), done.err
    assert "[step 2] model answers: 6 times 7 is 42." in done.err, done.err
