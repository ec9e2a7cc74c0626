"""Search attributes are registered once per worker, and runs ask the server nothing.

Every run still records which attributes it may upsert (the local activity's
marker, so a replaying worker decides the same), but the answer comes from the
worker's cache: no operator RPC per run. An execution continued as new takes the
answer from its input. The workflow upserts only attributes the cache lists, and
the cache lists only what the server reports registered.
"""

from __future__ import annotations

import asyncio
import json
from uuid import uuid4

from cli_helpers import patch_ids
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from towline import Agent, tool
from towline.client import run
from towline.messages import Message, ModelResponse, ToolCallPart
from towline.models import FunctionModel, ModelInfo, TestModel
from towline.results import RunInput
from towline.runtime.fingerprint import agent_version
from towline.runtime.registration import (
    ATTRIBUTE_CACHE,
    AttributeCache,
    registered_search_attributes,
)
from towline.runtime.search_attributes import ALL_KEYS
from towline.testing import history_events, run_to_end, towline_worker

agent = Agent(name="attribute-cache", model=TestModel())


def _markers(events: list[HistoryEvent], name: str) -> list[HistoryEvent]:
    return [e for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and e.marker_recorded_event_attributes.marker_name == name]


def _upserted(events: list[HistoryEvent]) -> set[str]:
    return {name for e in events
            if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
            for name in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields}


async def _registered_by_the_worker(client: Client) -> None:
    """Wait until the worker that is starting has registered and cached the attributes."""
    while ATTRIBUTE_CACHE.peek(client, client.namespace) is None:
        await asyncio.sleep(0.05)


async def test_runs_use_the_answer_the_worker_registered(client: Client) -> None:
    ATTRIBUTE_CACHE.clear()
    async with towline_worker(client, [agent]) as (tclient, queue):
        await asyncio.wait_for(_registered_by_the_worker(client), 30)
        before = ATTRIBUTE_CACHE.refreshes  # the worker registered and cached when it started
        results = await asyncio.gather(*(run(tclient, agent, "go", task_queue=queue) for _ in range(5)))
        assert ATTRIBUTE_CACHE.refreshes == before  # five runs, no operator RPC
        events = await history_events(tclient.get_workflow_handle(results[0].run_id))
    [marker] = _markers(events, "core_local_activity")
    facts = json.loads(marker.marker_recorded_event_attributes.details["result"].payloads[0].data)
    registered = await registered_search_attributes(client)
    assert set(facts["attributes"]) == registered
    started = set(events[0].workflow_execution_started_event_attributes.search_attributes.indexed_fields)
    # every registered towline attribute is set, but the lineage, which only a fork carries
    assert (started | _upserted(events)) - {"TemporalChangeVersion"} == registered - {
        "TowlineForkedFrom"}


async def test_concurrent_misses_share_one_refresh(client: Client) -> None:
    cache = AttributeCache(ttl=3600)
    answers = await asyncio.gather(*(cache.get(client, client.namespace) for _ in range(20)))
    assert cache.refreshes == 1
    expected = await registered_search_attributes(client)
    assert all(a == expected for a in answers)
    assert expected <= {k.name for k in ALL_KEYS}
    expired = AttributeCache(ttl=0)  # asked again once the answer is older than the TTL
    for _ in range(3):
        await expired.get(client, client.namespace)
    assert expired.refreshes == 3


async def test_only_attributes_the_cache_lists_are_upserted(client: Client) -> None:
    ATTRIBUTE_CACHE.clear()
    async with towline_worker(client, [agent]) as (tclient, queue):
        await asyncio.wait_for(_registered_by_the_worker(client), 30)
        ATTRIBUTE_CACHE.put(client, client.namespace, frozenset({"TowlineAgent", "TowlineStatus"}))
        try:
            # started without search attributes (not by `start_run`): the run upserts them all
            result, _ = await run_to_end(tclient, RunInput(agent=agent.name, prompt="go"),
                                         task_queue=queue, id=f"attribute-cache-{uuid4().hex[:8]}")
        finally:
            ATTRIBUTE_CACHE.clear()
        events = await history_events(tclient.get_workflow_handle(result.run_id))
    assert _upserted(events) - {"TemporalChangeVersion"} == {"TowlineAgent", "TowlineStatus"}


@tool
def tick() -> str:
    """Tick."""
    return "tock"


def ticking(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step <= 6:
        return ModelResponse(parts=[ToolCallPart(tool_name="tick")])
    return "done"


async def test_a_continued_execution_carries_the_answer(client: Client) -> None:
    ticker = Agent(name="attribute-cache-ticker", model=FunctionModel(ticking, model_name="ticker"),
                   tools=[tick])
    async with towline_worker(client, [ticker]) as (tclient, queue):
        result, chain = await run_to_end(
            tclient, RunInput(agent=ticker.name, prompt="go", continue_as_new_after_events=25),
            task_queue=queue, id=f"attribute-cache-{uuid4().hex[:8]}")
    assert result.output == "done" and len(chain) >= 3
    assert len(_markers(chain[0], "core_local_activity")) == 1
    for events in chain[1:]:
        assert _markers(events, "core_local_activity") == []  # no local activity: carried
        # one marker: the agent version's (the 1.0 engine records none, `workflows.versions`)
        assert patch_ids(events) == [f"towline-agent-version-{agent_version(ticker)}"]
        assert "TowlineRunStep" in _upserted(events)  # still upserted, from the carried answer
