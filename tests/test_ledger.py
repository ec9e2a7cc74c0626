"""The ledger in Temporal's history: exactly the confirmed counters, whatever hooks tried.

A run whose capability overwrites every runtime-owned counter in both model hooks
is read back from its workflow history (`fetch_history`): the `towline.counters`
header of each activity and the result hold exactly the confirmed sequence, the memo
ends with the result's counters, and the search attributes make the run findable in
visibility queries.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from scripts import Script, call, calls, text
from towline import Agent, Capability, Limits, ModelRequestState, ModelRetry, tool
from towline.client import run, start_run
from towline.errors import RunError
from towline.results import Counters
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import MEMO_KEY, counters_from_history, decode_counters
from towline.testing import towline_worker


@tool
def echo(word: str, retry: bool = False) -> str:
    """Echo a word; asks the model to retry when told to."""
    if retry:
        raise ModelRetry("try again")
    return word


def _tampered(state: ModelRequestState) -> ModelRequestState:
    state.tool_retries.clear()
    return state.model_copy(update={
        "tool_retries": {"echo": 0, "ghost": 5}, "output_retries_used": 9, "run_step": 0,
        "tool_calls": 77, "max_steps": 1000,
        "agent": state.agent.model_copy(update={"output_retries": 1000}),
    })


class TamperAll(Capability):
    """Overwrites every runtime-owned counter in both model hooks."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return _tampered(state)

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return _tampered(state)


SCRIPT = Script([
    calls(call("echo", {"word": "a", "retry": True}, "c1")),
    calls(call("echo", {"word": "b"}, "c2")),
    text("done"),
])
LIMITS = Limits(max_steps=6, output_retries=2)
AGENT = Agent(name="ledger-tamper", model=SCRIPT.model, tools=[echo],
              capabilities=[TamperAll], limits=LIMITS)
FAILING_SCRIPT = Script([calls(call("echo", {"word": "a"}, "f1")), text("unreachable")])
FAILING = Agent(name="ledger-failing", model=FAILING_SCRIPT.model, tools=[echo],
                capabilities=[TamperAll], limits=Limits(max_steps=1))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    async with towline_worker(client, [AGENT, FAILING]) as pair:
        yield pair


def _c(**values: Any) -> Counters:
    base: dict[str, Any] = {"max_steps": 6, "output_retries": 2,
                            "agent_version": agent_version(AGENT)}
    return Counters(**{**base, **values})


def _step(n: int, requests: int | None = None) -> dict[str, Any]:
    """Step n, after `requests` (default n) model requests (FunctionModel's usage: 10 in, 5 out)."""
    done = n if requests is None else requests
    return {"run_step": n, "requests": done, "input_tokens": 10 * done, "output_tokens": 5 * done}


EXPECTED = [
    _c(**_step(1, 0)),                                            # request 1 scheduled
    _c(**_step(1), tool_calls=1),                                 # its call c1 scheduled
    _c(**_step(2, 1), tool_calls=1, tool_retries={"echo": 1}),    # request 2: c1 asked to retry
    _c(**_step(2), tool_calls=2, tool_retries={"echo": 1}),       # its call c2 scheduled
    _c(**_step(3, 2), tool_calls=2),                              # request 3: c2 succeeded
    _c(**_step(3), tool_calls=2),                                 # the result
]
"""What the runtime confirmed before each activity (its `towline.counters` header), then the
result's counters: whatever the hooks wrote, every counter is the runtime's."""


async def _find(tclient: Client, query: str) -> list[str]:
    """Poll a visibility query until it matches (visibility is eventually consistent)."""
    found: list[str] = []
    for _ in range(100):
        found = [w.id async for w in tclient.list_workflows(query)]
        if found:
            return found
        await asyncio.sleep(0.1)
    return found


async def test_history_holds_exactly_the_confirmed_counters(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    run_id = f"ledger-{uuid.uuid4().hex[:8]}"
    handle = await start_run(tclient, AGENT, "go", task_queue=queue, id=run_id)
    result = await handle.result()

    history = await handle.fetch_history()
    snapshots = counters_from_history(history.events)
    assert snapshots == EXPECTED
    assert result.counters == EXPECTED[-1]

    upserts = [
        e.workflow_properties_modified_event_attributes.upserted_memo.fields[MEMO_KEY]
        for e in history.events if e.HasField("workflow_properties_modified_event_attributes")
    ]
    assert upserts and all(p.metadata["encoding"] == b"json/protobuf" for p in upserts)
    description = await handle.describe()
    memo = description.raw_description.workflow_execution_info.memo.fields[MEMO_KEY]
    assert decode_counters(memo) == EXPECTED[-1]

    query = (f'WorkflowId = "{run_id}" AND TowlineStatus = "succeeded" AND TowlineRunStep >= 2'
             f' AND TowlineAgent = "{AGENT.name}" AND TowlineToolCalls = 2'
             f' AND TowlineTotalTokens = 45 AND TowlineAgentVersion = "{agent_version(AGENT)}"')
    assert await _find(tclient, query) == [run_id]
    assert await _find(tclient, 'TowlineStatus = "succeeded" AND TowlineRunStep >= 2') != []


async def test_failed_run_ledger_matches_its_partial(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    run_id = f"ledger-failing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RunError) as info:
        await run(tclient, FAILING, "go", task_queue=queue, id=run_id)
    partial = info.value.partial
    assert info.value.reason == "MaxStepsExceeded"
    assert partial is not None

    history = await tclient.get_workflow_handle(run_id).fetch_history()
    snapshots = counters_from_history(history.events)
    base: dict[str, Any] = {"max_steps": 1, "output_retries": 1,
                            "agent_version": agent_version(FAILING)}
    assert snapshots == [
        Counters(**base, **_step(1, 0)),             # request 1
        Counters(**base, **_step(1), tool_calls=1),  # its call f1
        Counters(**base, **_step(1), tool_calls=1),  # the partial: then MaxStepsExceeded
    ]
    assert partial.counters == snapshots[-1]
    query = f'WorkflowId = "{run_id}" AND TowlineStatus = "failed" AND TowlineRunStep = 1'
    assert await _find(tclient, query) == [run_id]
