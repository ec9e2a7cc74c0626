"""A worker lost mid-tool is noticed in seconds (heartbeats), and tool effects stay honest.

Workers run `tests/worker_main.py` in their own processes and are SIGKILLed. The
tools (`durable_agents.heartbeat_agent`) have a 5-minute start-to-close timeout and
write no heartbeat code; the agent's 2-second heartbeat timeout is what lets the
run go on within seconds. Effects are counted by idempotency key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import pytest_asyncio
from durable_agents import (
    EFFECTS_ENV,
    WorkerProcess,
    effects,
    executions,
    heartbeat_agent,
    wait_for_file,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.service import WorkflowService

from scripts import returns
from towline.client import run_error, start_run
from towline.results import RunResult
from towline.runtime.plugin import TowlinePlugin
from towline.testing import towline_worker

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(120)]

OLD_TIMEOUT = 300.0
"""The tools' start-to-close timeout: how long a lost worker went unnoticed before."""


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


def _spawn(workers: list[WorkerProcess], target: str, namespace: str, queue: str, root: Path,
           die_before: str | None = None) -> WorkerProcess:
    w = WorkerProcess(target, queue, root, namespace, die_before=die_before)
    w.start()
    workers.append(w)
    return w


async def _lost_as_it_began(
    tclient: Client, workers: list[WorkerProcess], target: str, namespace: str, root: Path,
    prompt: str,
) -> WorkflowHandle[Any, RunResult]:
    """Run `prompt` (`tool:label`) on a worker that dies as the tool's first attempt begins,
    then start a replacement; the run's handle."""
    queue = f"hb-{uuid4().hex[:8]}"
    first = _spawn(workers, target, namespace, queue, root,
                   die_before=f"towline.tool.{prompt.split(':')[0]}")
    handle = await start_run(tclient, heartbeat_agent, prompt, task_queue=queue)
    assert await asyncio.to_thread(first.wait) != 0  # it died as the attempt began
    _spawn(workers, target, namespace, queue, root)
    return handle


async def _attempts(handle: WorkflowHandle[object, object], activity_type: str) -> list[int]:
    """Attempt numbers recorded for `activity_type` in the run's history."""
    history = await handle.fetch_history()
    scheduled = {
        e.event_id for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    }
    return [
        e.activity_task_started_event_attributes.attempt for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]


async def test_lost_worker_mid_tool_is_noticed_in_seconds(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = f"hb-{uuid4().hex[:8]}"
    first = _spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, heartbeat_agent, "sleepy_effect:x", task_queue=queue)
    await wait_for_file(tmp_path / "started")
    killed_at = time.monotonic()
    first.kill()
    _spawn(workers, target, namespace, queue, tmp_path)
    result = await asyncio.wait_for(handle.result(), 60)
    took = time.monotonic() - killed_at

    assert [r.status for r in returns(result.messages)] == ["succeeded"]
    assert result.output == "succeeded: sleepy x done"
    assert took < OLD_TIMEOUT / 5, f"the lost worker went unnoticed for {took:.0f} s"
    assert list(effects(tmp_path).values()) == [1]  # the retry found the effect applied
    assert await _attempts(handle, "towline.tool.sleepy_effect") == [2]


async def test_non_idempotent_tool_lost_after_it_started_is_unknown(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    queue = f"hb-{uuid4().hex[:8]}"
    first = _spawn(workers, target, namespace, queue, tmp_path)
    handle = await start_run(tclient, heartbeat_agent, "once_effect:hang", task_queue=queue)
    await wait_for_file(tmp_path / "started")
    first.kill()
    _spawn(workers, target, namespace, queue, tmp_path)
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), 60)
    error = run_error(failure.value)
    assert error.reason == "UncertainToolEffect"
    assert error.partial is not None
    [ret] = returns(error.partial.messages)
    assert ret.status == "unknown"
    assert "entered the tool and its worker was lost" in str(ret.content)
    # the second attempt refused to run the tool again: one execution, one effect
    assert list(executions(tmp_path).values()) == [1]
    assert list(effects(tmp_path).values()) == [1]


async def test_non_idempotent_tool_lost_before_it_started_runs_on_the_next_worker(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    handle = await _lost_as_it_began(tclient, workers, target, namespace, tmp_path,
                                     "once_effect:quick")
    result = await asyncio.wait_for(handle.result(), 60)

    assert [r.status for r in returns(result.messages)] == ["succeeded"]
    assert list(executions(tmp_path).values()) == [1]
    assert list(effects(tmp_path).values()) == [1]
    # attempt 1 was lost before the tool started; attempt 2 could prove it and ran it
    assert await _attempts(handle, "towline.tool.once_effect") == [2]


async def test_single_attempt_tool_lost_before_it_started_is_not_executed(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    assert heartbeat_agent.tools[2].effective_retry_policy() == RetryPolicy(maximum_attempts=1)
    handle = await _lost_as_it_began(tclient, workers, target, namespace, tmp_path,
                                     "single_attempt:x")
    result = await asyncio.wait_for(handle.result(), 60)

    # no attempt left, but its heartbeats prove the tool never ran: not "unknown"
    [ret] = returns(result.messages)
    assert ret.status == "not_executed"
    assert "lost its worker before the tool started" in str(ret.content)
    assert executions(tmp_path) == {}


async def test_unmarked_tool_costs_no_heartbeat_and_a_lost_first_attempt_is_unknown(
    tclient: Client, target: str, namespace: str, tmp_path: Path, workers: list[WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`entry_mark=False`: a call records no heartbeat at all, and the price is that
    an attempt lost before the tool started cannot be told from one lost inside it."""
    sent: list[object] = []
    rpc = WorkflowService.record_activity_task_heartbeat

    async def counted(self: WorkflowService, *args: Any, **kwargs: Any) -> Any:
        sent.append(args)
        return await rpc(self, *args, **kwargs)

    monkeypatch.setattr(WorkflowService, "record_activity_task_heartbeat", counted)
    monkeypatch.setenv(EFFECTS_ENV, str(tmp_path))
    queue = f"hb-{uuid4().hex[:8]}"
    async with towline_worker(tclient, [heartbeat_agent], task_queue=queue):
        for prompt in ("unmarked_effect:ok", "once_effect:ok"):
            done = await start_run(tclient, heartbeat_agent, prompt, task_queue=queue)
            assert [r.status for r in returns((await done.result()).messages)] == ["succeeded"]
            # the unmarked call sends no heartbeat; the marked one sends its entry mark
            assert len(sent) == (0 if prompt.startswith("unmarked") else 1)

    handle = await _lost_as_it_began(tclient, workers, target, namespace, tmp_path,
                                     "unmarked_effect:x")
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), 60)
    error = run_error(failure.value)
    assert error.reason == "UncertainToolEffect"
    assert error.partial is not None
    [ret] = returns(error.partial.messages)
    assert ret.status == "unknown"
    assert "records no entry mark" in str(ret.content)
    assert await _attempts(handle, "towline.tool.unmarked_effect") == [2]
    # the tool never ran: this `unknown` is false, the price of no entry mark (bench/chaos.py
    # measures how often it happens under a storm of kills)
    assert not [k for k in executions(tmp_path) if k.startswith(handle.id)]
