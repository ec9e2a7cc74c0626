"""OpenAI background mode (`ModelSettings.background`): a model call that outlasts a connection.

The run starts the response (one short activity), then polls it: a durable timer, one short
`towline.model_poll` activity, again, each wait doubling up to the agent's longest. No
activity runs while the model works; a worker SIGKILLed between polls loses nothing (another
polls the same response; nothing is asked twice); a cancelled run cancels the response. The
fake (`openai_background.py`) answers as the API does, and refuses to poll or cancel a
response it never created.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import openai
import pytest
from fake_server import FakeProvider
from forkserver import ForkedPopen, script_process
from openai_background import BackgroundResponses
from openai_replies import message_item
from provider_helpers import KEY, QUICK
from provider_worker import BACKGROUND_AGENT
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from towline import Agent, ModelSettings, WebSearch
from towline.client import start_run
from towline.runtime.plugin import TowlinePlugin
from towline.testing import history_events, towline_worker
from towline.workflows.model_call import poll_waits

WORKER = Path(__file__).resolve().parent / "provider_worker.py"
SEARCH = {"type": "web_search_call", "id": "ws_bg1", "status": "completed",
          "action": {"type": "search", "query": "otter habitats"}}
OUTPUT = [SEARCH, message_item("Otters live in rivers and seas.", "msg_bg1")]
HISTORY_EVENT_LIMIT = 51_200
"""Temporal's default limit of events in one workflow history (`limit.historyCount.error`)."""

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def background(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> BackgroundResponses:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    responses = BackgroundResponses(output=OUTPUT)
    provider.handlers.append(responses)
    return responses


def agent(name: str) -> Agent:
    return Agent(name=name, model="openai-responses:o3-deep-research", model_retry_policy=QUICK,
                 settings=ModelSettings(background=True), native_tools=[WebSearch()],
                 model_poll_interval=timedelta(milliseconds=200),
                 model_poll_max_interval=timedelta(milliseconds=500))


async def until(check: Callable[[], bool], seconds: float = 30) -> None:
    async with asyncio.timeout(seconds):
        while not check():
            await asyncio.sleep(0.02)


def activity_spans(events: list[Any]) -> list[tuple[str, float, float]]:
    """Each activity's type, and when it was scheduled and closed (seconds)."""
    scheduled: dict[int, tuple[str, float]] = {}
    spans: list[tuple[str, float, float]] = []
    for e in events:
        at = e.event_time.ToDatetime().timestamp()
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled[e.event_id] = (e.activity_task_scheduled_event_attributes.activity_type.name, at)
        for field in ("activity_task_completed_event_attributes", "activity_task_failed_event_attributes"):
            if e.HasField(field):
                name, start = scheduled[getattr(e, field).scheduled_event_id]
                spans.append((name, start, at))
    return spans


async def test_the_model_works_with_no_activity_running(
    client: Client, provider: FakeProvider, background: BackgroundResponses
) -> None:
    researcher = agent("bg-polled")
    async with towline_worker(client, [researcher]) as (tc, queue):
        handle = await start_run(tc, researcher, "Where do otters live?", task_queue=queue)
        await until(lambda: len(background.polls) >= 3)
        # while the model works: the run waits on a timer, no activity is running or scheduled
        async with asyncio.timeout(10):
            while (await handle.describe()).raw_description.pending_activities:
                await asyncio.sleep(0.02)
        assert not background.done.is_set()
        background.finish()
        result = await handle.result()
        events = await history_events(handle)

    assert result.output == "Otters live in rivers and seas."
    [create] = [r for r in provider.requests if r.method == "POST"]
    assert create.body["background"] is True and create.body["store"] is True
    assert create.body["tools"] == [{"type": "web_search"}]
    [job] = background.jobs
    assert set(background.polls) == {job}
    # one model request (counted once), then polls between timers
    assert (result.counters.run_step, result.counters.requests) == (1, 1)
    spans = activity_spans(events)
    kinds = [name for name, _, _ in spans]
    assert kinds == ["towline.model_request"] + ["towline.model_poll"] * len(background.polls)
    timers = [e for e in events if e.HasField("timer_started_event_attributes")]
    assert len(timers) == len(background.polls)
    # each activity is short; together they are a small share of the time the model worked
    worked = spans[-1][2] - spans[0][1]
    busy = sum(end - start for _, start, end in spans)
    assert busy < worked / 2, (busy, worked)
    [response] = [m for m in result.messages if m.kind == "response"]
    assert response.native_tool_calls[0][0].provider_data == SEARCH
    assert result.usage.native_tool_uses == {"web_search": 1}

    # a day of waiting fits one history: polls at the default cadence times the events one
    # poll cost here (timer, activity, workflow tasks)
    polled = [i for i, e in enumerate(events) if e.HasField("activity_task_scheduled_event_attributes")]
    per_poll = (polled[-1] - polled[1]) / (len(polled) - 2)
    defaults = Agent(name="defaults")
    wait = poll_waits(defaults.model_poll_interval, defaults.model_poll_max_interval)
    polls, elapsed = 0, 0.0
    while elapsed < 24 * 3600:
        elapsed += wait(polls).total_seconds()
        polls += 1
    assert polls * per_poll < HISTORY_EVENT_LIMIT / 4, (polls, per_poll)


@pytest.mark.parametrize("how", ["temporal-cancel", "cancel-signal"])
async def test_a_cancelled_run_cancels_its_background_response(
    client: Client, background: BackgroundResponses, how: str
) -> None:
    researcher = agent(f"bg-cancel-{how}")
    async with towline_worker(client, [researcher]) as (tc, queue):
        handle: WorkflowHandle[Any, Any] = await start_run(tc, researcher, "Research otters.",
                                                           task_queue=queue)
        await until(lambda: len(background.polls) >= 1)
        if how == "temporal-cancel":
            await handle.cancel()
        else:
            await handle.signal("cancel")
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    [job] = background.jobs
    assert background.cancels == [job] and background.jobs[job].status == "cancelled"
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "Cancelled"


@pytest.fixture
def spawn(provider: FakeProvider, target: str, namespace: str, tmp_path: Path
          ) -> Iterator[Callable[[str], subprocess.Popen[bytes] | ForkedPopen]]:
    """Worker processes (killed at the end) pointed at the fake provider."""
    made: list[subprocess.Popen[bytes] | ForkedPopen] = []
    log = tmp_path / "workers.log"

    def start(queue: str) -> subprocess.Popen[bytes] | ForkedPopen:
        env = {**os.environ, "OPENAI_BASE_URL": f"{provider.url}/v1", "OPENAI_API_KEY": KEY}
        with log.open("ab") as out:
            process = script_process(WORKER, ["--address", target, "--namespace", namespace,
                                              "--task-queue", queue], env=env,
                                     cwd=Path.cwd(), output=out.fileno())
        made.append(process)
        return process

    yield start
    for process in made:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


async def test_a_worker_killed_between_polls_loses_nothing(
    client: Client, provider: FakeProvider, target: str, namespace: str,
    background: BackgroundResponses, spawn: Callable[[str], subprocess.Popen[bytes] | ForkedPopen],
) -> None:
    queue = f"bg-kill-{uuid4().hex[:8]}"
    tc = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    first = spawn(queue)  # a worker process of its own, SIGKILLed between two polls
    handle = await start_run(tc, BACKGROUND_AGENT.name, "Where do otters live?", task_queue=queue)
    await until(lambda: len(background.polls) >= 2, 60)
    # between two polls: no poll activity in flight (a poll lost mid-flight would wait out its
    # start-to-close timeout before another worker retried it), the run on its timer
    async with asyncio.timeout(30):
        while (await handle.describe()).raw_description.pending_activities:
            await asyncio.sleep(0.01)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    seen = len(background.polls)
    await asyncio.sleep(1.0)  # the timer fires; the poll waits for a worker
    assert len(background.polls) == seen
    async with towline_worker(client, [BACKGROUND_AGENT], task_queue=queue):  # another worker
        await until(lambda: len(background.polls) > seen, 60)
        background.finish()
        result = await handle.result()

    assert result.output == "Otters live in rivers and seas."
    assert [r.method for r in provider.requests].count("POST") == 1  # started once, never again
    [job] = background.jobs
    assert set(background.polls) == {job}


def test_the_fake_refuses_a_response_it_never_created(
    provider: FakeProvider, background: BackgroundResponses
) -> None:
    sdk: Any = openai.OpenAI(base_url=f"{provider.url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="Response with id 'resp_never' not found."):
        sdk.responses.retrieve("resp_never")
    with pytest.raises(openai.NotFoundError, match="Response with id 'resp_never' not found."):
        sdk.responses.cancel("resp_never")
    started = sdk.responses.create(model="o3-deep-research", input="hi", background=True)
    assert started.status == "queued" and sdk.responses.retrieve(started.id).status == "in_progress"
    assert sdk.responses.cancel(started.id).status == "cancelled"
