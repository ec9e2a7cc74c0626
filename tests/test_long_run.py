"""A long run stays cheap per step: 500 steps, six executions, flat histories.

The short version of `bench/long_run.py` (10,000 steps): a tool call per step,
continue-as-new every ~1,500 events, a file payload store. The counters come out
exact, and the last execution costs what the first did per step: the model input
names the conversation with one key, and continue-as-new carries it by reference.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from towline import Agent, Limits, ModelResponse, ToolCallPart, tool
from towline.ledger import counters_from_history
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput, RunResult
from towline.testing import execution_histories, towline_worker

STEPS = 500


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adding(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step <= STEPS:
        return ModelResponse(parts=[ToolCallPart(tool_name="add", args={"a": info.run_step, "b": 1})])
    return f"added {len(messages) // 2} times"


agent = Agent(name="long-run", model=FunctionModel(adding, model_name="long-run"), tools=[add],
              limits=Limits(max_steps=STEPS + 1))


@pytest.mark.timeout(900)
async def test_a_500_step_run_stays_flat(client: Client, tmp_path: Path) -> None:
    async with towline_worker(client, [agent], payload_store=f"file://{tmp_path}") as (tclient, queue):
        handle = await tclient.start_workflow(
            "AgentRun", RunInput(agent=agent.name, prompt="go", continue_as_new_after_events=1500),
            id=f"long-run-{uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
        result = await handle.result()
        chain = [list(h.events) for h in
                 await execution_histories(tclient, handle.id, handle.first_execution_run_id)]

    assert (result.counters.run_step, result.counters.tool_calls) == (STEPS + 1, STEPS)
    assert result.output == f"added {STEPS} times"
    assert len(result.messages) == 2 * STEPS + 2
    assert len(chain) >= 5
    per_step: list[float] = []
    for events in chain:
        size = sum(e.ByteSize() for e in events)
        assert size < 10 * 1024 * 1024
        counters = counters_from_history(events)
        per_step.append(size / (counters[-1].run_step - counters[0].run_step))
        model_inputs = [e.activity_task_scheduled_event_attributes.input.payloads[0] for e in events
                        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                        and e.activity_task_scheduled_event_attributes.activity_type.name
                        == "towline.model_request"]
        later = [len(p.data) for p in model_inputs[1:]]  # the first carries the definitions
        assert max(later) - min(later) <= 8, later  # constant, whatever the conversation's length
        start = events[0].workflow_execution_started_event_attributes.input.payloads[0]
        # inline while the conversation is under the store's threshold, then a reference
        assert start.ByteSize() < 65 * 1024
    assert per_step[-1] <= 1.2 * per_step[0], per_step
    last_start = chain[-1][0].workflow_execution_started_event_attributes.input.payloads[0]
    assert len(last_start.external_payloads) == 1 and last_start.ByteSize() < 1024
    assert last_start.external_payloads[0].size_bytes > 100_000  # the conversation, stored


def test_the_collector_pause_nests_and_restores() -> None:
    """Decoding a long run pauses the garbage collector; it comes back as it was."""
    import gc
    import threading

    from towline.converter import paused_gc

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
