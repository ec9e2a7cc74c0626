"""Deadlines judged by workflow time (issue 40), real runs on the dev server.

- An approval sent after its call's deadline, while no worker ran (so the call's timeout and
  the late approval reach the next worker in one workflow task), is refused: the
  non-idempotent tool never runs, the approver is told the call timed out, and the run
  records the timeout.
- A background model call that never finishes is cancelled after
  `Agent.model_background_timeout` and the run fails `BackgroundTimeout` with the partial run
  (before engine 5 it was polled until Temporal's history limit ended the run, untyped).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import pytest_asyncio
from durable_agents import WorkerProcess
from hitl_agents import LEDGER_ENV, steps_prompt
from i40_deadline_agents import APPROVAL_TIMEOUT, late_desk
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from towline import Agent, ModelSettings
from towline.client import run_error, start_run
from towline.messages import Message, ModelResponse, Suspended, Usage
from towline.models import ModelInfo
from towline.results import RunResult
from towline.review import PendingApproval, pending
from towline.runtime.plugin import TowlinePlugin
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision
from towline.workflows.model_call import MAX_BACKGROUND_POLLS

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


async def _waiting_payment(handle: Any) -> PendingApproval:
    for _ in range(600):
        calls = [c for c in await pending(handle) if c.tool_name == "pay"]
        if calls:
            return calls[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no payment became pending")


async def test_an_approval_sent_after_the_deadline_is_refused_and_the_call_never_runs(
        tclient: Client, target: str, namespace: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, workers: list[WorkerProcess]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))  # the worker processes inherit it
    queue = f"i40-late-{uuid4().hex[:8]}"

    def spawn() -> WorkerProcess:
        w = WorkerProcess(target, queue, tmp_path, namespace, agents="i40_deadline_agents:AGENTS")
        w.start()
        workers.append(w)
        return w

    first = spawn()
    handle = await start_run(tclient, late_desk, steps_prompt([("pay", {"amount": 500, "to": "bob"})]),
                             task_queue=queue)
    call = await _waiting_payment(handle)
    assert call.expires_at is not None
    first.kill()  # no worker runs from here on: the timeout's workflow task waits for one
    late = call.expires_at - datetime.now(UTC) + timedelta(seconds=1)
    await asyncio.sleep(max(late.total_seconds(), 0))
    # the approval is sent after the deadline; the server holds it until a worker takes it
    sent = asyncio.ensure_future(handle.execute_update(
        "approve", ApprovalDecision(call_id=call.call_id, digest=call.digest, by="alice")))
    await asyncio.sleep(1)
    assert not sent.done()
    spawn()
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await asyncio.wait_for(sent, 60)
    told = str(refused.value.cause)
    assert f"tool call {call.call_id!r} is no longer waiting" in told and "timed out" in told, told

    result: RunResult = await asyncio.wait_for(handle.result(), 60)
    assert result.output == f"pay=denied:not approved: no decision within {APPROVAL_TIMEOUT}"
    assert not ledger.exists()  # the tool function never ran
    history = await handle.fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert "towline.tool.pay" not in scheduled
    trail = (await (await handle.describe()).memo())["towline.decisions"]
    decisions = [(e["call_id"], e["decision"], e["source"]) for e in trail["entries"]]
    assert decisions == [(call.call_id, "timed_out", "timeout")]  # no approval was recorded


@dataclass
class NeverFinishes:
    """A background model whose response never finishes: every poll says it still runs."""

    model_name: str = "i40-never-finishes"
    polls: dict[str, int] = field(default_factory=dict[str, int])
    cancelled: list[str] = field(default_factory=list[str])

    @property
    def name(self) -> str:
        return self.model_name

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        return ModelResponse(suspended=Suspended(
            reason="background", provider="openai", status="queued",
            response_id=f"bg-{activity.info().workflow_id}"), usage=Usage(requests=1))

    async def poll(self, response_id: str, info: ModelInfo) -> ModelResponse:
        self.polls[response_id] = self.polls.get(response_id, 0) + 1
        return ModelResponse(suspended=Suspended(reason="background", provider="openai",
                                                 response_id=response_id, status="in_progress"),
                             usage=Usage(requests=1))

    async def cancel(self, response_id: str) -> None:
        self.cancelled.append(response_id)


async def test_a_background_call_that_never_finishes_fails_the_run_typed_after_its_bound(
        client: Client) -> None:
    model = NeverFinishes()
    agent = Agent(name="i40-background-bound", model=model, settings=ModelSettings(background=True),
                  model_poll_interval=timedelta(milliseconds=100),
                  model_poll_max_interval=timedelta(milliseconds=400),
                  model_background_timeout=timedelta(seconds=3))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "research it", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 60)
    err = run_error(failed.value)
    response_id = f"bg-{handle.id}"
    assert err.reason == "BackgroundTimeout", err
    assert response_id in err.message and "model_background_timeout" in err.message, err.message
    assert err.partial is not None and err.partial.counters.run_step == 1
    assert [m.kind for m in err.partial.messages] == ["request"]  # the prompt, no answer
    assert model.cancelled == [response_id]  # the provider was told to stop
    history = await handle.fetch_history()
    events = list(history.events)
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() for e in events
              if e.HasField("timer_started_event_attributes")]
    activities = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                  if e.HasField("activity_task_scheduled_event_attributes")]
    # polled until the bound: the waits never add up to more (the last is cut to end there)
    assert len(timers) >= 2 and sum(timers, timedelta()) <= timedelta(seconds=3), timers
    assert activities == ["towline.model_request", *["towline.model_poll"] * len(timers),
                          "towline.model_cancel"]
    assert model.polls[response_id] == len(timers)
    # the polls' own bound keeps a call's history far from Temporal's 51,200-event limit
    polled = [i for i, e in enumerate(events) if e.HasField("activity_task_scheduled_event_attributes")]
    per_poll = (polled[-2] - polled[1]) / (len(polled) - 3)
    assert MAX_BACKGROUND_POLLS * per_poll < 51_200 / 2, per_poll
