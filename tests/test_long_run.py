"""A long run stays cheap per step: 300 steps, five executions or more, flat histories.

The short version of `bench/long_run.py` (10,000 steps): a tool call per step,
continue-as-new every ~900 events, a file payload store (32 KiB threshold). The counters come out
exact, and the last execution costs what the first did per step: the model input
names the conversation with one key, and continue-as-new carries it by reference.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from towline import Agent, Limits, ModelResponse, Tool, ToolCallPart, tool
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput
from towline.runtime.ledger import MEMO_KEY, counters_from_history, decode_counters
from towline.storage.payload_store import PayloadStore
from towline.testing import run_to_end, towline_worker

pytestmark = pytest.mark.heavy

STEPS = 300


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adding(name: str, steps: int, adder: Tool, **options: Any) -> Agent:
    """An agent whose model calls `adder` once per step for `steps` steps, then answers."""

    def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        if info.run_step <= steps:
            return ModelResponse(parts=[ToolCallPart(tool_name=adder.name,
                                                     args={"a": info.run_step, "b": 1})])
        return f"added {len(messages) // 2} times"

    return Agent(name=name, model=FunctionModel(script, model_name=name), tools=[adder],
                 limits=Limits(max_steps=steps + 1), **options)


agent = adding("long-run", STEPS, add)


@pytest.mark.timeout(900)
async def test_a_300_step_run_stays_flat(client: Client, tmp_path: Path) -> None:
    store = PayloadStore(f"file://{tmp_path}", threshold=32 * 1024)
    async with towline_worker(client, [agent], payload_store=store) as (tclient, queue):
        result, chain = await run_to_end(
            tclient, RunInput(agent=agent.name, prompt="go", continue_as_new_after_events=900),
            task_queue=queue, id=f"long-run-{uuid4().hex[:8]}")

    assert (result.counters.run_step, result.counters.tool_calls) == (STEPS + 1, STEPS)
    assert result.output == f"added {STEPS} times"
    assert len(result.messages) == 2 * STEPS + 2
    assert len(chain) >= 5
    per_step: list[float] = []
    for events in chain:
        size = sum(e.ByteSize() for e in events)
        assert size < 10 * 1024 * 1024
        counters = counters_from_history(events)
        memo = events[0].workflow_execution_started_event_attributes.memo.fields
        begun = decode_counters(memo[MEMO_KEY]).run_step if MEMO_KEY in memo else 0
        per_step.append(size / (counters[-1].run_step - begun))  # the steps this execution made
        model_inputs = [e.activity_task_scheduled_event_attributes.input.payloads[0] for e in events
                        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                        and e.activity_task_scheduled_event_attributes.activity_type.name
                        == "towline.model_request"]
        later = [len(p.data) for p in model_inputs[1:]]  # the first carries the definitions
        assert max(later) - min(later) <= 8, later  # constant, whatever the conversation's length
        start = events[0].workflow_execution_started_event_attributes.input.payloads[0]
        # inline while the conversation is under the store's threshold, then a reference
        assert start.ByteSize() < 33 * 1024
    assert per_step[-1] <= 1.2 * per_step[0], per_step
    last_start = chain[-1][0].workflow_execution_started_event_attributes.input.payloads[0]
    assert len(last_start.external_payloads) == 1 and last_start.ByteSize() < 1024
    assert last_start.external_payloads[0].size_bytes > 50_000  # the conversation, stored


def test_the_collector_pause_nests_and_restores() -> None:
    """Decoding a long run pauses the garbage collector; it comes back as it was."""
    import gc
    import threading

    from towline.runtime.heap import paused_gc

    assert gc.isenabled()
    inner = threading.Event()
    release = threading.Event()

    def other() -> None:
        with paused_gc():
            inner.set()
            release.wait(10)

    with paused_gc():
        assert not gc.isenabled()
        thread = threading.Thread(target=other)
        thread.start()
        inner.wait(10)
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    thread.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # disabled before: left disabled
    finally:
        gc.enable()


SHORT = 120


# idempotent: retried, not refused, when a crash test kills its worker mid-call
plus = Tool.from_function(add.function, name="plus", idempotent=True)
# a model call lost with a killed worker is retried after 4 s without heartbeats, not 20 s
# (at 2 s, heartbeats every 1.6 s, a worker on a loaded machine can miss its own)
brief = adding("brief-run", SHORT, plus, model_heartbeat_timeout=timedelta(seconds=4))
BRIEF_AGENTS = [brief]
"""For worker processes (`tests/worker_main.py --agents test_long_run:BRIEF_AGENTS`)."""


@pytest.mark.timeout(600)
async def test_a_continued_execution_lets_its_conversation_go(client: Client, tmp_path: Path) -> None:
    """An execution that continued-as-new leaves no copy of the conversation to the collector.

    Its instance becomes cyclic garbage once evicted; had it kept its messages, each
    continue-as-new would leave a whole copy of the conversation for Python's next full
    collection to scan and free, a pause every workflow on the worker waits for (the
    deadlock detector fails activations past 2 s). With the collector off, what is still
    alive after the run is counted: the result's copy, the worker's request cache and the
    last execution's, not one per execution.
    """
    import gc

    gc.collect()
    before = sum(isinstance(o, ModelResponse) for o in gc.get_objects())
    gc.disable()
    try:
        async with towline_worker(client, [brief], payload_store=f"file://{tmp_path}") as (tclient, queue):
            workflow_id = f"brief-run-{uuid4().hex[:8]}"
            result, chain = await run_to_end(
                tclient, RunInput(agent=brief.name, prompt="go", continue_as_new_after_events=300),
                task_queue=queue, id=workflow_id)
            executions = len(chain)
            alive = sum(isinstance(o, ModelResponse) for o in gc.get_objects()) - before
            # a closed execution is queried by replaying it, which keeps what it held
            first_run = chain[0][0].workflow_execution_started_event_attributes.first_execution_run_id
            first_messages = await tclient.get_workflow_handle(workflow_id, run_id=first_run).query(
                "messages")
    finally:
        gc.enable()
    assert 0 < len(first_messages) < len(result.messages)
    assert result.counters.run_step == SHORT + 1
    assert executions >= 5
    # the result's messages, the worker's request cache, the last execution's: 3 copies
    assert alive <= 3 * (SHORT + 1) + 10, (alive, executions)


async def test_a_worker_settles_the_heap_it_starts_with(client: Client) -> None:
    """What a worker process holds when it starts (imports, mostly) is frozen out of full
    collections once, so each one scans only what runs add."""
    import gc

    from towline.runtime.heap import settle_heap

    async with towline_worker(client, [brief]):
        for _ in range(100):  # the plugin settles it as the worker starts polling
            if gc.get_freeze_count():
                break
            await asyncio.sleep(0.1)
        frozen = gc.get_freeze_count()
        assert frozen > 20_000  # temporalio, pydantic and towline's own modules, at least
        assert settle_heap() is False  # once per process
        assert gc.get_freeze_count() == frozen
