"""Billable Actions counted from real histories (`towline.telemetry.actions`), and `towline show` printing them.

A plain temporalio workflow does one of each billable thing (a retried activity, a
timer, a signal, an update, local activities in one workflow task, a child workflow,
a search-attribute upsert and a `patched` marker whose change-version upsert is exempt)
on the session's dev server; a towline run with two tool calls is counted the same way,
and `towline show` prints and `--json` carries its count.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

from cli_helpers import cli_env, towline
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from scripts import Script, call, calls, text
from towline import Agent, tool
from towline.client import start_run
from towline.telemetry.actions import ActionCount, billable_actions
from towline.testing import execution_histories, towline_worker

STATUS = SearchAttributeKey.for_keyword("TowlineStatus")
_failed_once: set[str] = set()


@activity.defn
async def flaky(key: str) -> str:
    """Fails its first attempt (one retry: two billable attempts)."""
    if key not in _failed_once:
        _failed_once.add(key)
        raise RuntimeError("first attempt fails")
    return "ok"


@activity.defn
async def plain(word: str) -> str:
    return word


@workflow.defn
class Child:
    @workflow.run
    async def run(self) -> str:
        return "child"


@workflow.defn
class Probe:
    """One of each billable thing, in a known number."""

    def __init__(self) -> None:
        self.go = False
        self.value = ""

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.update
    def set_value(self, value: str) -> str:
        self.value = value
        return value

    @workflow.query
    def current(self) -> str:
        return self.value

    @workflow.run
    async def run(self, key: str) -> str:
        workflow.patched("probe-v1")  # a marker and an exempt TemporalChangeVersion upsert
        workflow.upsert_search_attributes([STATUS.value_set("probing")])
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=3)
        await workflow.execute_activity(flaky, key, start_to_close_timeout=timedelta(seconds=10),
                                        retry_policy=retry)
        await workflow.execute_activity(plain, "a", start_to_close_timeout=timedelta(seconds=10))
        await asyncio.gather(*(workflow.execute_local_activity(
            plain, w, start_to_close_timeout=timedelta(seconds=10)) for w in ("x", "y")))
        await workflow.sleep(timedelta(milliseconds=50))
        await workflow.execute_child_workflow(Child.run, id=f"{workflow.info().workflow_id}-child")
        await workflow.wait_condition(lambda: self.go and bool(self.value))
        return self.value


async def test_each_category_is_counted_from_a_real_history(client: Client, task_queue: str) -> None:
    wid = f"actions-probe-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[Probe, Child],
                      activities=[flaky, plain], workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await client.start_workflow(Probe.run, wid, id=wid, task_queue=task_queue)
        assert await handle.execute_update(Probe.set_value, "v") == "v"
        await handle.signal(Probe.proceed)
        assert await handle.result() == "v"
        assert await handle.query(Probe.current) == "v"
    events = list((await handle.fetch_history()).events)
    kinds = [e.event_type for e in events]
    # the patch's TemporalChangeVersion upsert is in the history, and not billed
    assert kinds.count(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES) == 2
    local_markers = [e for e in events if e.marker_recorded_event_attributes.marker_name
                     == "core_local_activity"]
    assert len(local_markers) == 2
    counted = billable_actions(events, queries=1, heartbeats=3)
    assert counted == ActionCount(workflow=1, activities=3, search_attribute_upserts=1, timers=1,
                                  signals=1, updates=1, queries=1, local_activities=1,
                                  heartbeats=3, child_workflows=1)
    assert counted.total == 14
    assert counted.line() == (
        "14 billable (workflow 1, activities 3, search-attribute upserts 1, timers 1, "
        "signals 1, updates 1, queries 1, local-activity tasks 1, heartbeats 3, "
        "child workflows 1)")
    child = (await client.get_workflow_handle(f"{wid}-child").fetch_history()).events
    assert billable_actions(child) == ActionCount(workflow=1)


@tool
def echo(word: str) -> str:
    """Echo a word."""
    return word


SCRIPT = Script([calls(call("echo", {"word": "a"}, "c1")), calls(call("echo", {"word": "b"}, "c2")),
                 text("done")])
AGENT = Agent(name="actions-two-tools", model=SCRIPT.model, tools=[echo])


async def test_a_towline_run_is_counted_and_shown(
    client: Client, target: str, namespace: str
) -> None:
    wid = f"actions-run-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [AGENT]) as (tclient, queue):
        handle = await start_run(tclient, AGENT, "go", task_queue=queue, id=wid)
        result = await handle.result()
        assert (result.counters.requests, result.counters.tool_calls) == (3, 2)
    chain = await execution_histories(client, wid)
    events = [e for h in chain for e in h.events]
    counted = billable_actions(events)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    # three model requests and two tool calls, each an activity billed once (no retries)
    assert len([n for n in scheduled if "model" in n]) == 3, scheduled
    assert len([n for n in scheduled if "tool" in n]) == 2, scheduled
    assert counted.workflow == 1 and counted.activities == len(scheduled)
    assert counted.timers == counted.signals == counted.child_workflows == 0
    upserts = [e for e in events if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES]
    towline_upserts = [e for e in upserts if any(
        k.startswith("Towline") for k in e.upsert_workflow_search_attributes_event_attributes
        .search_attributes.indexed_fields)]
    assert counted.search_attribute_upserts == len(towline_upserts) >= 1

    env = cli_env(target, namespace=namespace)
    shown = await towline("show", wid, env=env)
    assert shown.code == 0, shown
    assert f"Actions   {counted.line()}  (queries and heartbeats not counted" in shown.out, shown.out
    as_json = await towline("show", wid, "--json", env=env)
    assert json.loads(as_json.out)["actions"] == counted.to_json()
