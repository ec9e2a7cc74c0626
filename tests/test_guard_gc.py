"""The garbage collector's callbacks are not the hook's code.

A process with a `gc.callbacks` entry that reads the clock (hypothesis installs one; so do
APM agents) used to fail any run whose hook allocated enough to trigger a collection: the
callback ran inside the hook's calls, and the guard blamed the hook (`NondeterministicHook`,
"called time.perf_counter()"). The guard keeps the collector paused while a hook runs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from towline import Agent, Middleware
from towline.client import run
from towline.testing import towline_worker

seen: list[float] = []
enabled: list[bool] = []


def _timing_callback(phase: str, info: dict[str, Any]) -> None:
    del info
    if phase == "start":
        seen.append(time.perf_counter())


@pytest.fixture
def clock_reading_gc_callback() -> Iterator[None]:
    gc.callbacks.append(_timing_callback)
    try:
        yield
    finally:
        gc.callbacks.remove(_timing_callback)


def _allocating(state: dict[str, Any]) -> dict[str, Any]:
    """Makes thousands of reference cycles: enough to trigger collections, were they on."""
    del state
    enabled.append(gc.isenabled())
    for _ in range(20_000):
        node: dict[str, Any] = {}
        node["self"] = node
    return {}


async def test_a_collection_during_a_hook_is_not_the_hook(
    client: Client, clock_reading_gc_callback: None
) -> None:
    agent = Agent(name="gc-callbacks", model="test",
                  capabilities=[Middleware("allocating", before_model=_allocating)])
    before = len(seen)
    enabled.clear()
    _allocating({})  # outside a hook the collector runs (and its callback with it)
    assert len(seen) > before
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "hi", task_queue=queue)
    assert result.output
    assert enabled == [True, False]  # the collector is off while the hook runs
