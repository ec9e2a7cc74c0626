"""The ledger's contract, read from the history itself (issue 29).

Each run of `tests/history_ledger.py` tampers with all six runtime-owned counters in both
model hooks, in place and by copy. Its history is read back (`fetch_history`, every execution,
a sub-agent's child run too): the `towline.counters` header of each activity it scheduled, in
order, then the counters of its result, failure or continue-as-new input, are exactly what the
runtime confirmed before each of those I/O steps; the memo and the search attributes at the end
equal the result's counters; and every history replays. The recordings are the
`history-ledger-*` ones of `RECORDINGS` (plus a run that fails `UsageLimitExceeded`), recorded
live here.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from history_agents import RECORDINGS as ALL_RECORDINGS
from history_agents import Recording
from history_ledger import (
    LEDGER_AGENTS,
    LEDGER_MODELS,
    TAMPERED,
    child_agent,
    start_memo,
    usage_agent,
)
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer

from towline import Agent
from towline.client import run_error
from towline.results import Counters, RunInput, RunResult
from towline.runtime import search_attributes as sa
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import HEADER_KEY, MEMO_KEY, counters_from_history, decode_counters
from towline.runtime.plugin import TowlinePlugin
from towline.runtime.search_attributes import start_attributes
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun

RECORDINGS = {r.workflow_id.removeprefix("history-ledger-"): r for r in ALL_RECORDINGS
              if r.workflow_id.startswith("history-ledger-")}
AGENTS = {a.name: a for agent in LEDGER_AGENTS for a in agent.all_agents()}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of the recordings."""
    async with towline_worker(client, LEDGER_AGENTS, models=LEDGER_MODELS) as pair:
        yield pair


def _c(agent: Agent, step: int, requests: int, calls: int, retries: dict[str, int] | None = None,
       tokens: tuple[int, int] = (0, 0)) -> Counters:
    """The counters of `agent`'s run at step `step` after `requests` model requests (10 tokens
    in, 5 out each, plus `tokens` from elsewhere) and `calls` tool calls."""
    return Counters(max_steps=agent.limits.max_steps, output_retries=agent.limits.output_retries,
                    agent_version=agent_version(agent), run_step=step, requests=requests,
                    tool_calls=calls, tool_retries=retries or {},
                    input_tokens=10 * requests + tokens[0], output_tokens=5 * requests + tokens[1])


class Recorded:
    """One run of a recording: its executions' histories, its outcome, its description."""

    def __init__(self, histories: list[WorkflowHistory], result: RunResult | None,
                 failure: WorkflowFailureError | None, memo: Counters, attributes: dict[str, Any]):
        self.histories, self.result, self.failure = histories, result, failure
        self.memo, self.attributes = memo, attributes

    @property
    def events(self) -> list[HistoryEvent]:
        return [e for h in self.histories for e in h.events]

    def counters(self) -> list[Counters]:
        """The confirmed sequence, read from every execution's history."""
        return [c for h in self.histories for c in counters_from_history(h.events)]

    def final(self) -> Counters:
        if self.result is not None:
            return self.result.counters
        assert self.failure is not None
        partial = run_error(self.failure).partial
        assert partial is not None
        return partial.counters


async def _replays(histories: list[WorkflowHistory]) -> None:
    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=LEDGER_AGENTS,
                                                                     models=LEDGER_MODELS)])
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{history.workflow_id}: {result.replay_failure!r}"


async def _record(pair: tuple[Client, str], rec: Recording) -> Recorded:
    """Run `rec` as `scripts/record_history.py` does (as `start_run` starts it), read it back
    and check that every execution replays."""
    tclient, queue = pair
    agent = AGENTS[rec.input.agent]
    handle = await tclient.start_workflow(
        "AgentRun", rec.input, id=f"{rec.workflow_id}-{uuid.uuid4().hex[:6]}", task_queue=queue,
        result_type=RunResult, search_attributes=start_attributes(agent.name, agent_version(agent)),
        memo=rec.memo)
    if rec.interact is not None:
        await rec.interact(handle)
    result, failure = None, None
    try:
        result = await handle.result()
    except WorkflowFailureError as e:
        failure = e
    assert handle.first_execution_run_id is not None
    histories = await execution_histories(tclient, handle.id, handle.first_execution_run_id)
    await _replays(histories)
    memo, attributes = await _visible(tclient, handle.id)
    return Recorded(histories, result, failure, memo, attributes)


async def _visible(tclient: Client, workflow_id: str) -> tuple[Counters, dict[str, Any]]:
    """The memo's counters and the towline search attributes of the run's latest execution."""
    description = await tclient.get_workflow_handle(workflow_id).describe()
    memo = decode_counters(description.raw_description.workflow_execution_info.memo.fields[MEMO_KEY])
    return memo, sa.values_of(description.typed_search_attributes)


def _exact_at_end(recorded: Recorded, status: str) -> None:
    """The visible counters at the end are the final ones, exactly."""
    final = recorded.final()
    assert recorded.counters()[-1] == final
    assert recorded.memo == final
    attrs = recorded.attributes
    assert (attrs["TowlineStatus"], attrs["TowlineRunStep"], attrs["TowlineToolCalls"],
            attrs["TowlineTotalTokens"]) == (status, final.run_step, final.tool_calls,
                                             final.total_tokens)


def _untampered(sequence: list[Counters]) -> None:
    """No hook's value got through (the limits stay the run's, no tool the hooks invented)."""
    for c in sequence:
        assert c.max_steps != TAMPERED["max_steps"] and c.output_retries != TAMPERED["output_retries"]
        assert "ghost" not in c.tool_retries and c.output_retries_used == 0


def _headers(recorded: Recorded) -> list[str]:
    """The activity type of every activity that carries the header (all of them must)."""
    found: list[str] = []
    for e in recorded.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            attrs = e.activity_task_scheduled_event_attributes
            assert HEADER_KEY in attrs.header.fields, attrs.activity_type.name
            found.append(attrs.activity_type.name)
    return found


async def test_a_completed_run(worker: tuple[Client, str]) -> None:
    recorded = await _record(worker, RECORDINGS["plain"])
    agent = AGENTS[RECORDINGS["plain"].input.agent]
    assert recorded.counters() == [
        _c(agent, 1, 0, 0),                       # request 1
        _c(agent, 1, 1, 1),                       # its call, which asks for a retry
        _c(agent, 2, 1, 1, {"echo4": 1}),         # request 2
        _c(agent, 2, 2, 2, {"echo4": 1}),         # its call, which succeeds
        _c(agent, 3, 2, 2),                       # request 3
        _c(agent, 3, 3, 2),                       # the result
    ]
    assert _headers(recorded) == ["towline.model_request", "towline.tool.echo4"] * 2 + [
        "towline.model_request"]
    _exact_at_end(recorded, "succeeded")


async def test_a_run_that_exceeds_max_steps(worker: tuple[Client, str]) -> None:
    recorded = await _record(worker, RECORDINGS["max-steps"])
    agent = AGENTS[RECORDINGS["max-steps"].input.agent]
    assert recorded.failure is not None and run_error(recorded.failure).reason == "MaxStepsExceeded"
    assert recorded.counters() == [
        _c(agent, 1, 0, 0), _c(agent, 1, 1, 1), _c(agent, 2, 1, 1), _c(agent, 2, 2, 2),
        _c(agent, 2, 2, 2),  # the partial: run_step still at the last request made
    ]
    _untampered(recorded.counters())
    _exact_at_end(recorded, "failed")


async def test_a_run_that_exceeds_its_token_limit(worker: tuple[Client, str]) -> None:
    rec = Recording("history-ledger-usage", RunInput(agent=usage_agent.name, prompt="go"),
                    memo=start_memo(usage_agent))
    recorded = await _record(worker, rec)
    assert recorded.failure is not None
    assert run_error(recorded.failure).reason == "UsageLimitExceeded"
    assert recorded.counters() == [
        _c(usage_agent, 1, 0, 0), _c(usage_agent, 1, 1, 1), _c(usage_agent, 2, 1, 1),
        _c(usage_agent, 2, 2, 1),  # response 2 passed the limit: its call never ran
    ]
    _exact_at_end(recorded, "failed")


async def test_a_session_across_sends(worker: tuple[Client, str]) -> None:
    recorded = await _record(worker, RECORDINGS["session"])
    agent = AGENTS[RECORDINGS["session"].input.agent]
    assert recorded.counters() == [
        _c(agent, 1, 0, 0), _c(agent, 1, 1, 1), _c(agent, 2, 1, 1),  # turn 1, then it waits
        _c(agent, 3, 2, 1), _c(agent, 3, 3, 2), _c(agent, 4, 3, 2),  # turn 2, after the send
        _c(agent, 4, 4, 2),                                          # the result
    ]
    # the visible counters were exact at each wait, and at the end
    memos = [decode_counters(e.workflow_properties_modified_event_attributes.upserted_memo
                             .fields[MEMO_KEY]) for e in recorded.events
             if e.HasField("workflow_properties_modified_event_attributes")
             and MEMO_KEY in e.workflow_properties_modified_event_attributes.upserted_memo.fields]
    assert memos == [_c(agent, 2, 2, 1), _c(agent, 4, 4, 2)]
    _exact_at_end(recorded, "succeeded")


async def test_a_run_that_continues_as_new(worker: tuple[Client, str]) -> None:
    recorded = await _record(worker, RECORDINGS["continued"])
    agent = AGENTS[RECORDINGS["continued"].input.agent]
    assert len(recorded.histories) >= 2, "the run should have continued as new"
    chained: list[Counters] = []
    for i, history in enumerate(recorded.histories):
        sequence = counters_from_history(history.events)
        if i > 0:  # the execution starts from what the previous one handed over, exactly
            started = history.events[0].workflow_execution_started_event_attributes
            assert decode_counters(started.memo.fields[MEMO_KEY]) == chained[-1]
        chained += sequence
    # with each continue-as-new input (equal to the last tool call's counters) taken out once,
    # the sequence is the one a run without continue-as-new confirms
    deduplicated = [c for i, c in enumerate(chained) if i == 0 or c != chained[i - 1]]
    expected: list[Counters] = []
    for n in range(1, 5):
        expected += [_c(agent, n, n - 1, n - 1), _c(agent, n, n, n)]
    assert deduplicated == [*expected, _c(agent, 5, 4, 4), _c(agent, 5, 5, 4)]
    assert len(chained) == len(deduplicated) + len(recorded.histories) - 1
    _exact_at_end(recorded, "succeeded")


async def test_a_sub_agents_child_run(worker: tuple[Client, str]) -> None:
    tclient, _ = worker
    recorded = await _record(worker, RECORDINGS["parent"])
    parent = AGENTS[RECORDINGS["parent"].input.agent]
    children = [e.start_child_workflow_execution_initiated_event_attributes.workflow_id
                for e in recorded.events
                if e.HasField("start_child_workflow_execution_initiated_event_attributes")]
    assert len(children) == 1
    child_histories = await execution_histories(tclient, children[0], None)
    await _replays(child_histories)
    child = [c for h in child_histories for c in counters_from_history(h.events)]
    assert child == [_c(child_agent, 1, 0, 0), _c(child_agent, 1, 1, 1), _c(child_agent, 2, 1, 1),
                     _c(child_agent, 2, 2, 1)]
    # the parent's delegation is a tool call (in the workflow: no activity) that adds the
    # child's usage to the parent's ledger
    assert recorded.counters() == [_c(parent, 1, 0, 0), _c(parent, 2, 1, 1, tokens=(20, 10)),
                                   _c(parent, 2, 2, 1, tokens=(20, 10))]
    memo, _ = await _visible(tclient, children[0])
    assert memo == child[-1]
    _exact_at_end(recorded, "succeeded")


async def test_a_hook_that_calls_a_model(worker: tuple[Client, str]) -> None:
    recorded = await _record(worker, RECORDINGS["hook-model"])
    agent = AGENTS[RECORDINGS["hook-model"].input.agent]
    # Summarization's request (step 3's before_model) carries the counters confirmed when the
    # hook ran, step 2's; its usage (reported as llm_usage) joins the ledger when the turn
    # commits, after the step's own request
    assert recorded.counters() == [
        _c(agent, 1, 0, 0), _c(agent, 1, 1, 1), _c(agent, 2, 1, 1, {"echo4": 1}),
        _c(agent, 2, 2, 2, {"echo4": 1}),
        _c(agent, 2, 2, 2),                   # the summariser's request
        _c(agent, 3, 2, 2),                   # the run's request 3
        _c(agent, 3, 3, 2, tokens=(10, 5)),   # the result: the summary's tokens counted
    ]
    assert _headers(recorded) == [
        "towline.model_request", "towline.tool.echo4", "towline.model_request",
        "towline.tool.echo4", "towline.model_request", "towline.model_request"]
    _exact_at_end(recorded, "succeeded")
