"""A decision no worker took within the wait is reported as what it is, and applied once later.

With no worker running, Temporal's server *admits* an update and holds it (in memory) until a
worker takes it: a `towline approve` that gave up waiting said "no worker answered ... start a
worker" and exited 1, after twice its `--wait`, and the approval was applied, audited and its
tool run as soon as a worker started. Now the CLI says `pending` (exit code 3) within about its
`--wait`; `towline.review` raises `DecisionPending` (or `DecisionNotDelivered` when nothing was
sent); `towline serve`'s REST decision answers 202 `pending` (it answered 504). Each test then
starts a worker and reads back from the run that the approval was applied exactly once: one
audit entry (`towline show --json`), one execution of the tool (the history's activities).
The server losing an admitted update on restart (what the wording warns of) is checked too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cli_helpers import cli_env, json_of, towline
from ports import free_port
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from examples.calculator import careful_agent
from towline import DecisionNotDelivered, DecisionPending
from towline.client import start_run
from towline.devserver import start_dev_server
from towline.review import PendingApproval, approve, decide, decision, pending
from towline.review.delivery import update_stage
from towline.serve.app import ServeConfig, create_app
from towline.testing import towline_worker

pytestmark = pytest.mark.heavy

PROMPT = "What is 6 times 7?"
ANSWER = "6 times 7 is 42."


async def _waiting(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """The run's state once its `multiply` call waits for approval."""
    async with asyncio.timeout(60):
        while True:
            state: dict[str, Any] = await handle.query("state")
            if state.get("pending_approvals"):
                return state
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture(loop_scope="session")
async def orphan(client: Client) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], str, str]]:
    """A run whose `multiply` call waits for approval, and whose worker has just stopped (the
    server still lists it as a poller); its handle, task queue and the call's digest."""
    async with towline_worker(client, [careful_agent]) as (tclient, queue):
        handle = await start_run(tclient, careful_agent, PROMPT, task_queue=queue)
        state = await _waiting(handle)
    (call_id, info), = state["pending_approvals"].items()
    assert call_id == "call_1"
    try:
        yield handle, queue, str(info["digest"])
    finally:
        if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:  # a test failed
            await handle.terminate(reason="test over")


async def _applied_once(client: Client, handle: WorkflowHandle[Any, Any], queue: str,
                        by: str) -> None:
    """Start a worker: the run completes, its audit trail holds the one approval by `by`, and
    `multiply` ran once."""
    async with towline_worker(client, [careful_agent], task_queue=queue) as (tclient, _):
        result: dict[str, Any] = await tclient.get_workflow_handle(handle.id).result()
    assert result["output"] == ANSWER
    shown = json_of(await towline("show", handle.id, "--json", env=_env(client)))
    decisions = [(d["call_id"], d["decision"], d["by"]) for d in shown["decisions"]]
    assert decisions == [("call_1", "approved", by)], shown["decisions"]
    history = await handle.fetch_history()
    ran = [e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
           and e.activity_task_scheduled_event_attributes.activity_type.name == "towline.tool.multiply"]
    assert len(ran) == 1


def _env(client: Client) -> dict[str, str]:
    return cli_env(client.service_client.config.target_host, client.namespace)


async def test_cli_approve_with_no_worker_says_pending_and_is_applied_once_later(
    client: Client, orphan: tuple[WorkflowHandle[Any, Any], str, str]
) -> None:
    handle, queue, _ = orphan
    began = time.monotonic()
    done = await towline("approve", handle.id, "call_1", "--by", "alice", "--wait", "5",
                         env=_env(client))
    elapsed = time.monotonic() - began
    assert done.code == 3, done
    [line] = done.err.strip().splitlines()
    assert line.startswith("towline: pending: approve pending: the Temporal server holds it, "
                           "but no worker took it within"), line
    assert "A worker that starts will apply it" in line and "restart of the Temporal server " \
        "loses it" in line, line
    assert f"--task-queue {queue}" in line, line  # what to start
    assert "error" not in line, line
    # within its --wait (the old command took twice that: the state query, then the update)
    assert elapsed < 9.5, elapsed
    await _applied_once(client, handle, queue, "alice")


async def test_python_decisions_say_pending_or_not_delivered(
    client: Client, orphan: tuple[WorkflowHandle[Any, Any], str, str]
) -> None:
    handle, queue, digest = orphan
    # the helper reads the state first: no worker answers it, so nothing is sent
    with pytest.raises(DecisionNotDelivered, match="no worker answered the run's state query "
                       "within 1s, so it was not sent; nothing will apply it"):
        await approve(handle, wait=2, by="nobody")
    # a decision naming the call it read earlier is sent: the server holds it
    call = _call(handle, digest)
    with pytest.raises(DecisionPending) as caught:
        await decide(handle, [decision(call, "approve")], by="bob", wait=3)
    e = caught.value
    assert (e.update, e.workflow_id) == ("decide", handle.id)
    assert e.message.startswith("decide pending: the Temporal server holds it")
    assert await update_stage(handle, e.update_id) is not None
    await _applied_once(client, handle, queue, "bob")
    entries = await handle.get_update_handle(e.update_id).result()
    assert [x["decision"] for x in entries] == ["approved"]


def _call(handle: WorkflowHandle[Any, Any], digest: str) -> PendingApproval:
    """The waiting call as `pending` gave it while the worker ran (its digest)."""
    return PendingApproval(workflow_id=handle.id, call_id="call_1", tool_name="multiply",
                       args={}, run_step=1, digest=digest, index=1)


async def test_serve_answers_202_pending_and_the_decision_is_applied_once_later(
    client: Client, orphan: tuple[WorkflowHandle[Any, Any], str, str]
) -> None:
    handle, queue, digest = orphan
    from towline.client import with_towline

    app = create_app(ServeConfig(client=with_towline(client, [careful_agent]),
                                 agents=[careful_agent], task_queue=queue, update_wait=3))
    transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                 timeout=30) as http:
        answer = await http.post(f"/runs/{handle.id}/approvals/call_1",
                                 json={"decision": "approve", "digest": digest, "by": "web"})
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert (body["decision"], body["callId"]) == ("pending", "call_1"), body
    assert body["message"].startswith("approve pending: the Temporal server holds it"), body
    await _applied_once(client, handle, queue, "web")


async def test_an_admitted_decision_is_lost_when_the_server_restarts(tmp_path: Path) -> None:
    """What the pending wording warns of: the server holds it in memory only."""
    db, port = tmp_path / "temporal.sqlite", free_port()
    server = await start_dev_server(db_path=db, ui=False, port=port)
    try:
        async with towline_worker(server.client, [careful_agent]) as (tclient, queue):
            handle = await start_run(tclient, careful_agent, PROMPT, task_queue=queue)
            digest = str((await _waiting(handle))["pending_approvals"]["call_1"]["digest"])
        call = _call(handle, digest)
        with pytest.raises(DecisionPending) as caught:
            await decide(handle, [decision(call, "approve")], by="lost", wait=2)
        assert await update_stage(handle, caught.value.update_id) is not None
    finally:
        await server.shutdown()
    server = await start_dev_server(db_path=db, ui=False, port=port)
    try:
        handle = server.client.get_workflow_handle(handle.id)
        assert await update_stage(handle, caught.value.update_id) is None
        async with towline_worker(server.client, [careful_agent], task_queue=queue) as (tclient, _):
            calls = await pending(tclient.get_workflow_handle(handle.id), wait=20)
        assert [c.call_id for c in calls] == ["call_1"]  # still waiting: the approval is gone
        await handle.terminate(reason="test over")
    finally:
        await server.shutdown()
