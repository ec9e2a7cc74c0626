"""What the ledger costs a run (issue 21), counted from real histories.

A 10-step run started by `start_run` records one `core_patch` marker (the agent version's:
the 1.0 engine records none, `workflows.versions`), sets its
search attributes and its visible counters (memo `towline.counters`) in the start request
(not billed) and writes them together only when they change meaningfully: at status
changes, at most every `ATTRIBUTE_STEPS` steps between them, and at the end (the confirmed
counters ride on every activity's header). The memo and the search attributes are
exact at the end and while a session waits.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from cli_helpers import patch_ids, towline_upserts, until_state
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from towline import Agent, ModelResponse, ToolCallPart, tool
from towline.client import start_run, with_towline
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import Counters
from towline.runtime import search_attributes as sa
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import MEMO_KEY, counters_from_history, decode_counters
from towline.testing import towline_worker
from towline.workflows import SendInput
from towline.workflows.ledger import ATTRIBUTE_STEPS

STEPS = 10


@tool
def tick() -> str:
    """Tick."""
    return "tock"


def ticking(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """A tool call in each of the first nine steps, then the answer (FunctionModel: 10 in, 5 out)."""
    if info.run_step < STEPS:
        return ModelResponse(parts=[ToolCallPart(tool_name="tick", tool_call_id=f"t{info.run_step}")])
    return "done"


def twice(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """A session turn: one tool call, then an answer."""
    if info.run_step % 2:
        return ModelResponse(parts=[ToolCallPart(tool_name="tick", tool_call_id=f"s{info.run_step}")])
    return f"answer {info.run_step}"


TEN = Agent(name="ledger-cost-ten", model=FunctionModel(ticking, model_name="ticking"), tools=[tick])
SESSION = Agent(name="ledger-cost-session", model=FunctionModel(twice, model_name="twice"),
                tools=[tick])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for both agents of this module."""
    async with towline_worker(client, [TEN, SESSION]) as pair:
        yield pair


def _expected(agent: Agent, steps: int) -> list[Counters]:
    """The confirmed sequence of a run whose steps but the last call `tick`: the counters in
    the header of each activity (model request n: step n, n - 1 requests and their tokens;
    tool call n: counted), then the result's."""
    base = Counters(max_steps=agent.limits.max_steps, output_retries=agent.limits.output_retries,
                    agent_version=agent_version(agent))

    def after(n: int, step: int, calls: int) -> Counters:
        return base.model_copy(update={"run_step": step, "requests": n, "input_tokens": 10 * n,
                                       "output_tokens": 5 * n, "tool_calls": calls})

    found: list[Counters] = []
    for n in range(1, steps + 1):
        found.append(after(n - 1, n, n - 1))  # model request n
        if n < steps:
            found.append(after(n, n, n))  # its tool call
    return [*found, after(steps, steps, steps - 1)]


def _memo_upserts(events: list[Any]) -> list[Counters]:
    """The `towline.counters` memo of each memo upsert (the visible counters written)."""
    return [decode_counters(e.workflow_properties_modified_event_attributes.upserted_memo
                            .fields[MEMO_KEY]) for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
            and MEMO_KEY in e.workflow_properties_modified_event_attributes.upserted_memo.fields]


async def _attributes(handle: WorkflowHandle[Any, Any]) -> tuple[dict[str, Any], Counters]:
    """The run's search attributes (towline's, by name) and the counters its memo holds."""
    description = await handle.describe()
    memo = description.raw_description.workflow_execution_info.memo.fields[MEMO_KEY]
    return sa.values_of(description.typed_search_attributes), decode_counters(memo)


def _exact(counters: Counters, status: str, agent: Agent) -> dict[str, Any]:
    return {"TowlineAgent": agent.name, "TowlineAgentVersion": agent_version(agent),
            "TowlineStatus": status, "TowlineRunStep": counters.run_step,
            "TowlineToolCalls": counters.tool_calls, "TowlineTotalTokens": counters.total_tokens}


async def test_a_ten_step_run_records_two_markers_and_two_upserts(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    handle = await start_run(tclient, TEN, "go", task_queue=queue,
                             id=f"ledger-cost-{uuid.uuid4().hex[:8]}")
    result = await handle.result()
    assert result.output == "done" and result.counters.run_step == STEPS
    events = list((await handle.fetch_history()).events)

    # markers: the agent version's (the 1.0 engine records none); the other marker is the
    # `towline.runtime.search_attributes` local activity's (the worker's facts)
    assert patch_ids(events) == [f"towline-agent-version-{agent_version(TEN)}"]
    markers = [e.marker_recorded_event_attributes.marker_name for e in events
               if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert sorted(markers) == ["core_local_activity", "core_patch"]

    # agent, version, status and zero counters came in the start request: no upsert at start;
    # the Int attributes once after ATTRIBUTE_STEPS steps, and the status at the end
    started = set(events[0].workflow_execution_started_event_attributes.search_attributes
                  .indexed_fields)
    assert {"TowlineAgent", "TowlineAgentVersion", "TowlineStatus", "TowlineRunStep"} <= started
    assert ATTRIBUTE_STEPS == STEPS
    assert towline_upserts(events) == [
        {"TowlineRunStep", "TowlineToolCalls", "TowlineTotalTokens"}, {"TowlineStatus"}]

    # the confirmed counters ride on the activities' headers and the result; the visible
    # counters (the start request's memo, `start_run`'s) are written with the attributes:
    # once, at step ATTRIBUTE_STEPS, where they already equal the result's (the end then
    # changes the status only)
    assert counters_from_history(events) == _expected(TEN, STEPS)
    assert result.counters == _expected(TEN, STEPS)[-1]
    started_memo = events[0].workflow_execution_started_event_attributes.memo.fields[MEMO_KEY]
    assert decode_counters(started_memo) == _expected(TEN, STEPS)[0].model_copy(
        update={"run_step": 0})
    assert _memo_upserts(events) == [result.counters]
    values, memo = await _attributes(handle)
    assert memo == result.counters
    assert values == _exact(result.counters, "succeeded", TEN)


async def _waiting(handle: WorkflowHandle[Any, Any], answers: int) -> None:
    await until_state(handle, lambda s: s["status"] == "waiting"
                      and s["counters"]["run_step"] == 2 * answers)


async def test_search_attributes_are_exact_at_each_status_change(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    handle = await start_run(tclient, SESSION, "hello", task_queue=queue, session=True,
                             id=f"ledger-cost-session-{uuid.uuid4().hex[:8]}")
    await _waiting(handle, 1)
    values, memo = await _attributes(handle)
    assert memo.run_step == 2 and memo.tool_calls == 1
    assert values == _exact(memo, "waiting", SESSION)  # exact while the session waits
    await handle.execute_update("send", SendInput(content="again"))
    await _waiting(handle, 2)
    values, memo = await _attributes(handle)
    assert memo.run_step == 4 and memo.tool_calls == 2
    assert values == _exact(memo, "waiting", SESSION)
    await handle.signal("end")
    result = await handle.result()
    values, memo = await _attributes(handle)
    assert memo == result.counters
    assert values == _exact(result.counters, "succeeded", SESSION)
    events = list((await handle.fetch_history()).events)
    # waiting (with the counters), running, waiting (with the counters), succeeded
    assert [("TowlineStatus" in u, "TowlineRunStep" in u) for u in towline_upserts(events)] == [
        (True, True), (True, False), (True, True), (True, False)]
    assert len(patch_ids(events)) == 1  # the agent version's (1.0 records no engine marker)


async def test_a_namespace_without_the_attributes_still_starts_runs(client: Client,
                                                                     target: str) -> None:
    """The start request's attributes are refused where they are not registered: `start_run`
    starts again without them (the run then upserts only what the namespace registered)."""
    namespace = f"ledger-cost-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(RegisterNamespaceRequest(
        namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)))
    bare = with_towline(await Client.connect(target, namespace=namespace), [TEN])
    handle = None
    for _ in range(200):  # a namespace just registered takes a moment to be served
        try:
            handle = await start_run(bare, TEN, "go", task_queue="ledger-cost-nobody")
            break
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            await asyncio.sleep(0.1)
    assert handle is not None
    try:
        description = await handle.describe()
        assert sa.values_of(description.typed_search_attributes) == {}
    finally:
        await handle.terminate()
