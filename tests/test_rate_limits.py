"""A provider rate limit shared by every worker (docs/fleet.md, "Rate limits shared by every
worker"), enforced by the Temporal server: the page's three `towline worker` commands as
three processes (one serves both sides, one only the runs' queue, one only the model queue),
the research example on `openai:gpt-4.1-mini` through the official SDK against the fake
provider, and a small version of `bench/rate_limit.py`.

Temporal's limiter is a GCRA token bucket holding one second of tokens: after a quiet spell
`rps + 1` tasks may start at once, then one every `1/rps` seconds; so at most
`rps * (w + 1) + 1` start in any `w` seconds. A task queue the server has only just loaded
lets more through for a moment (`bench/rate_limit.py --cold` shows it), so the measurement
starts after one warm-up run, as a long-running fleet is.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from cli_helpers import assert_one_line_error, cli_env, towline
from readme import read_until, readme_process, stop_process
from temporalio.client import Client

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "bench"),
                str(Path(__file__).resolve().parent / "providers")]

from fake_server import FakeProvider, Recorded, Reply  # pyright: ignore[reportMissingImports]
from openai_replies import completion  # pyright: ignore[reportMissingImports]
from rate_limit import (  # pyright: ignore[reportMissingImports]
    KEY,
    MODEL,
    MODEL_QUEUE,
    start_runs,
    warm_up,
    worker_command,
)

from towline.client import with_towline
from towline.errors import ConfigurationError
from towline.fleet.routing import Dispatch, ModelRoute, ModelRoutes, model_queue_for, run_priority
from towline.runtime.worker import fleet_workers

RPS = 5
RUNS = 30
"""A backlog that takes the limit five seconds or more to drain: time enough for both new
model-queue workers to start polling and take a share, on a loaded machine too."""
BOTH = ("towline worker --agent examples.research:agent --model-queue 'openai:*=openai-models' "
        "--model-rps 'openai:*=5'")


def test_routes_read_from_the_flags() -> None:
    routes = ModelRoutes.parse(["openai:*=openai-models", "anthropic:claude-*=claude"],
                               ["openai:*=5", "anthropic:claude-*=0.5"])
    assert routes.table() == {"openai:*": "openai-models", "anthropic:claude-*": "claude"}
    assert routes.queues() == {"openai-models": 5.0, "claude": 0.5}
    assert model_queue_for(routes.table(), "openai:gpt-4.1-mini") == "openai-models"
    assert model_queue_for(routes.table(), "anthropic:claude-sonnet-4-5") == "claude"
    assert model_queue_for(routes.table(), "ollama:llama3.2") is None  # the run's own queue
    assert Dispatch.of({"*": "all"}, None, None).model_queue("anything") == "all"
    assert run_priority(None, None).priority_key is None
    assert (run_priority(1, "acme").priority_key, run_priority(1, "acme").fairness_key) == (1, "acme")
    for queues, rates, fragment in (
        (["openai:*"], [], "not PATTERN=VALUE"),
        (["openai:*=a", "openai:*=b"], [], "twice"),
        (["openai:*=a"], ["openai:*=fast"], "not a number"),
        (["openai:*=a"], ["openai:*=0"], "positive"),
        (["openai:*=a", "gpt*=a"], ["openai:*=5", "gpt*=2"], "two rates"),
    ):
        with pytest.raises(ConfigurationError, match=fragment):
            ModelRoutes.parse(queues, rates)
    with pytest.raises(ConfigurationError, match="the runs' own task queue"):
        fleet_workers(cast(Client, None), task_queue="q",  # refused before any client is used
                      routes=ModelRoutes((ModelRoute("*", "q"),)))


async def test_a_rate_without_its_queue_is_refused(target: str, namespace: str) -> None:
    done = await towline("worker", "--agent", "examples.research:agent", "--model-rps",
                         "openai:*=5", env=cli_env(target, namespace))
    assert_one_line_error(done, 2, "no --model-queue routes 'openai:*'")


async def _all_scheduled(client: Client, ids: list[str], timeout: float = 60) -> None:
    """Wait until each run has scheduled its model call."""
    async with asyncio.timeout(timeout):
        for i in ids:
            while not (await client.get_workflow_handle(i).describe()).raw_description.pending_activities:
                await asyncio.sleep(0.2)


def _model_activities(events: list[Any]) -> tuple[list[str], list[tuple[float, str]]]:
    """Task queues the model activities were scheduled on, and (dispatch time, worker) of each."""
    scheduled: dict[int, str] = {}
    started: list[tuple[float, str]] = []
    for e in events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "towline.model_request":
                scheduled[e.event_id] = attrs.task_queue.name
        elif e.HasField("activity_task_started_event_attributes"):
            attrs = e.activity_task_started_event_attributes
            if attrs.scheduled_event_id in scheduled:
                started.append((e.event_time.ToDatetime().timestamp(), attrs.identity))
    return list(scheduled.values()), started


async def test_three_workers_share_one_limit(client: Client, target: str, namespace: str) -> None:
    provider = FakeProvider().start()
    refused: list[Recorded] = []

    def answer(r: Recorded) -> Reply:
        if "Question 7:" in str(r.body) and not refused:  # the provider's 429, once
            refused.append(r)
            return Reply({"error": {"message": "Rate limit reached", "type": "requests"}},
                         status=429, headers={"retry-after": "2"})
        return Reply(completion("Done."))

    provider.rules.append(answer)
    env = cli_env(target, namespace, {"TOWLINE_MODEL": MODEL, "OPENAI_BASE_URL": f"{provider.url}/v1",
                                      "OPENAI_API_KEY": KEY})
    assert worker_command(RPS) == BOTH  # the bench's workers are the page's
    only_models = ("towline worker --agent examples.research:agent --model-queue "
                   "'openai:*=openai-models' --model-rps 'openai:*=5' --only models")
    workers = [
        await readme_process("towline worker --agent examples.research:agent --model-queue "
                             "'openai:*=openai-models' --only workflows", env=env),
        await readme_process(only_models, env=env),
    ]
    try:
        starts = await asyncio.gather(*(read_until(w.stderr, "Ctrl-C stops.") for w in workers))
        assert "task queue 'towline'" in starts[0] and "model queues only" in starts[1]
        assert f"model queue '{MODEL_QUEUE}' (openai:*): at most 5 calls/s" in starts[1]
        towline_client = with_towline(client)
        await warm_up(towline_client, provider, pause=0)  # the server has the queue and its limit
        stop_process(workers[1])
        await asyncio.wait_for(workers[1].wait(), 30)
        # A backlog: every run's model call waits on the model queue, which nobody polls now.
        ids = await start_runs(towline_client, RUNS, f"rl-{time.monotonic_ns()}")
        await _all_scheduled(towline_client, ids)
        workers += [await readme_process("towline worker --agent examples.research:agent "
                                         "--model-queue 'openai:*=openai-models' --model-rps "
                                         "'openai:*=5'", env=env),
                    await readme_process("towline worker --agent examples.research:agent "
                                         "--model-queue 'openai:*=openai-models' --model-rps "
                                         "'openai:*=5' --only models", env=env)]
        results = await asyncio.wait_for(asyncio.gather(
            *(towline_client.get_workflow_handle(i).result() for i in ids)), 120)
    finally:
        for w in workers:
            stop_process(w)
        await asyncio.gather(*(asyncio.wait_for(w.wait(), 30) for w in workers))
        provider.stop()
    assert [r["output"] for r in results] == ["Done."] * RUNS

    # The server's dispatch times (each model activity's start, as its history records it)
    # keep to the token bucket: at most RPS * (w + 1) + 1 in any w seconds (+1 for clocks).
    queues: list[str] = []
    dispatched: list[tuple[float, str]] = []
    for i in ids:
        q, d = _model_activities([e async for e in towline_client.get_workflow_handle(i).fetch_history_events()])
        queues += q
        dispatched += d
    assert set(queues) == {MODEL_QUEUE} and len(dispatched) == RUNS
    times = sorted(t for t, _ in dispatched)
    for a in range(len(times)):
        for b in range(a + 1, len(times)):
            assert b - a + 1 <= RPS * (times[b] - times[a] + 1) + 2, (a, b, times)
    # the whole backlog was there at once: only the limit spread it out
    assert times[-1] - times[0] >= (RUNS - RPS - 2) / RPS, times
    assert len({worker for _, worker in dispatched}) == 2  # both model-queue workers served

    # At the provider: each request once, and the 429's retry only after its Retry-After. (The
    # rate is asserted on the server's dispatch times above, where the limit is enforced: at the
    # provider, a just-started worker's first calls take a second longer than its later ones on
    # a loaded machine, which bunches or spreads arrivals by as much. `bench/rate_limit.py`
    # measures the provider's rate with warm workers.)
    retried = [r for r in provider.requests if "Question 7:" in str(r.body)]
    assert len(retried) == 2 and retried[1].at - retried[0].at >= timedelta(seconds=2).total_seconds()
    assert len(provider.requests) == RUNS + 1
    assert len({str(r.body) for r in provider.requests}) == RUNS  # the retry the only repeat


async def test_dev_serves_a_rate_limited_model_queue(tmp_path: Path) -> None:
    """docs/fleet.md's `towline dev` with a model queue: the embedded server enforces the
    limit and its worker serves the queue (a free port if 7233 is taken; state in tmp_path)."""
    import re

    from temporalio.client import Client as PlainClient

    provider = FakeProvider().start()
    provider.rules.append(lambda r: Reply(completion("Done.")))
    env = cli_env(extra={"TOWLINE_MODEL": MODEL, "OPENAI_BASE_URL": f"{provider.url}/v1",
                         "OPENAI_API_KEY": KEY})
    dev = await readme_process("towline dev --agent examples.research:agent --model-queue "
                               "'openai:*=openai-models' --model-rps 'openai:*=5'", env=env,
                               cwd=tmp_path)
    try:
        said = await read_until(dev.stderr, "Ctrl-C stops.")
        assert f"model queue '{MODEL_QUEUE}' (openai:*): at most 5 calls/s" in said, said
        address = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
        assert address, said
        towline_client = with_towline(await PlainClient.connect(address.group(1)))
        await warm_up(towline_client, provider, pause=1.2)
        ids = await start_runs(towline_client, 12, f"dev-{time.monotonic_ns()}")
        results = await asyncio.wait_for(asyncio.gather(
            *(towline_client.get_workflow_handle(i).result() for i in ids)), 60)
        histories = [[e async for e in towline_client.get_workflow_handle(i).fetch_history_events()]
                     for i in ids]
    finally:
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 30)
        provider.stop()
    assert dev.returncode == 0
    assert [r["output"] for r in results] == ["Done."] * 12
    queues = [q for events in histories for q in _model_activities(events)[0]]
    times = sorted(t for events in histories for t, _ in _model_activities(events)[1])
    assert set(queues) == {MODEL_QUEUE} and len(times) == 12
    assert times[-1] - times[0] >= (12 - RPS - 2) / RPS, times  # the server spread them out
