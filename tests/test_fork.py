"""`towline fork` / `towline.client.fork`: a new run from a recorded run's conversation at a step.

One three-step run of `timetravel_agents.shop` (charge, look up, answer; a middleware counts
the turns in contributed state), which continues-as-new after every step, so each request
is read back across executions through the request chain. It is forked before each of its
steps, once with a new prompt (through the CLI, as a user would) and once on another model.
Each fork's first model request, read back from the fork's own history, must be the
original's request at that step; its state the original's before that step; its ledger
its own work from zero; its lineage in the memo, the search attribute, and the current
details the UI shows.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from cli_helpers import assert_one_line_error, cli_env, json_of, towline
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter
from timetravel_agents import OTHER_MODEL, SHOP_MODEL, other, shop

from towline.client import fork
from towline.messages import ModelRequest, UserPart
from towline.replay.run_history import RecordedRequest, RunHistory, read_run_history
from towline.results import RunInput, RunResult
from towline.runtime.ledger import counters_from_history
from towline.runtime.search_attributes import FORKED_FROM
from towline.testing import towline_worker
from towline.timetravel.lineage import FORKED_FROM_MEMO, STATE_MEMO_LIMIT, state_snapshot


async def _details(handle: WorkflowHandle[Any, Any]) -> str:
    """The run's current details, as the Temporal UI reads them (the metadata query)."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def _forks_listed(client: Client, origin: str, expected: int) -> set[str]:
    """The runs the visibility store lists as forks of `origin`, by workflow id (one per
    execution: continue-as-new carries the attribute; the store lags: poll)."""
    found: set[str] = set()
    for _ in range(100):
        found = {w.id async for w in client.list_workflows(f'TowlineForkedFrom = "{origin}"')}
        if len(found) >= expected:
            return found
        await asyncio.sleep(0.2)
    return found


async def _check_fork(tclient: Client, original: RunHistory, step: int, handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    result = await handle.result()
    forked = await read_run_history(tclient, handle.id)
    first, was = forked.requests[0], original.request(step)
    assert was is not None and was.messages is not None
    assert first.messages == was.messages and first.definitions == was.definitions
    # a fork's ledger is its own: from zero, never the original's
    first_execution = tclient.get_workflow_handle(handle.id, run_id=handle.first_execution_run_id)
    snapshots = counters_from_history((await first_execution.fetch_history()).events)
    # (the first model request's header: step 1, nothing done before it)
    assert (snapshots[0].run_step, snapshots[0].requests, snapshots[0].tool_calls,
            snapshots[0].total_tokens) == (1, 0, 0, 0)
    steps_left = 3 - step + 1
    assert (result.counters.run_step, result.counters.requests) == (steps_left, steps_left)
    assert result.counters.tool_calls == max(0, 2 - step + 1)
    # the state before the step, then the fork's own turns
    assert result.state["turns"] == (step - 1) + steps_left
    # the lineage, in its latest execution (it inherited continue-as-new: the memo is carried)
    assert len(forked.executions) == steps_left
    latest = tclient.get_workflow_handle(handle.id)
    desc = await latest.describe()
    assert (await desc.memo())[FORKED_FROM_MEMO] == {"run_id": original.workflow_id, "step": step}
    assert desc.typed_search_attributes.get(FORKED_FROM) == original.workflow_id
    assert f"- forked from [{original.workflow_id}](/namespaces/{tclient.namespace}/workflows/" \
           f"{original.workflow_id}) at step {step}" in await _details(latest)
    return result


async def test_a_fork_at_each_step_starts_from_that_request(client: Client, target: str,
                                                            namespace: str) -> None:
    origin_id = f"tt-fork-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [shop], models={OTHER_MODEL: other},
                              allowed_models=[OTHER_MODEL]) as (tclient, queue):
        # continues-as-new after every step: 3 executions, requests chained across them
        origin = await tclient.start_workflow(
            "AgentRun", RunInput(agent=shop.name, prompt="buy a widget",
                                 continue_as_new_after_events=12),
            id=origin_id, task_queue=queue, result_type=RunResult)
        result = await origin.result()
        assert result.output == f"done by {SHOP_MODEL}: buy a widget"
        original = await read_run_history(tclient, origin_id)
        assert len(original.executions) == 3 and original.steps == [1, 2, 3]
        assert [original.state_before(r)[0] for r in original.requests] == [
            {"turns": 0, "looked_up": None}, {"turns": 1, "looked_up": None},
            {"turns": 2, "looked_up": "widget"}]

        for step in (1, 2, 3):  # re-asked: the fork takes the same path from there
            handle = await fork(tclient, origin_id, at_step=step)
            forked = await _check_fork(tclient, original, step, handle)
            assert forked.output == result.output
        listed = await _forks_listed(tclient, origin_id, 3)
        assert len(listed) == 3

        # another model: the fork asks it, and its answer comes from it
        handle = await fork(tclient, origin_id, at_step=3, model=OTHER_MODEL, id=f"{origin_id}-m")
        assert (await handle.result()).output == f"done by {OTHER_MODEL}: buy a widget"
        assert (await read_run_history(tclient, handle.id)).requests[0].model == OTHER_MODEL

        # the CLI, as a user would: a new prompt follows the conversation of step 3
        env = cli_env(target, namespace)
        done = await towline("fork", origin_id, "--at-step", "3", "--prompt", "and a gift box",
                             "--id", f"{origin_id}-p", "--wait", "--json", env=env)
        shown = json_of(done)
        assert shown["forked_from"] == {"run_id": origin_id, "step": 3}
        assert shown["result"]["output"] == f"done by {SHOP_MODEL}: and a gift box"
        assert shown["result"]["counters"]["run_step"] == 1
        prompted = (await read_run_history(tclient, f"{origin_id}-p")).requests[0].messages
        was = original.request(3)
        assert prompted is not None and was is not None and was.messages is not None
        assert prompted[:-1] == was.messages
        assert isinstance(prompted[-1], ModelRequest)
        assert prompted[-1].parts == [UserPart(content="and a gift box")]

        plain = await towline("fork", origin_id, "--at-step", "2", env=env)
        assert plain.code == 0, plain
        assert plain.out.strip().startswith(f"{origin_id}-fork2-")
        assert f"Forked {origin_id} at step 2 as {plain.out.strip()}" in plain.err
        await tclient.get_workflow_handle(plain.out.strip()).result()
        shown_run = await towline("show", plain.out.strip(), env=env)
        assert f"Forked    from {origin_id} at step 2" in shown_run.out, shown_run
        as_json = json_of(await towline("show", plain.out.strip(), "--json", env=env))
        assert as_json["forked_from"] == {"run_id": origin_id, "step": 2}
        assert json_of(await towline("show", origin_id, "--json", env=env))["forked_from"] is None

        missing = await towline("fork", origin_id, "--at-step", "9", env=env)
        assert_one_line_error(missing, 2, "made no model request at step 9", "steps 1-3")
        taken = await towline("fork", origin_id, "--at-step", "1", "--id", f"{origin_id}-p",
                              env=env)
        assert_one_line_error(taken, 1, "already exists")


def test_a_state_too_large_or_not_json_is_recorded_as_unknown() -> None:
    converter = DataConverter.default.payload_converter
    assert state_snapshot({"turns": 2}, converter) == {"turns": 2}
    assert state_snapshot({"notes": "x" * STATE_MEMO_LIMIT}, converter) is None
    assert state_snapshot({"handle": object()}, converter) is None


def test_a_fork_says_when_the_state_before_a_step_is_unknown() -> None:
    def history(states: list[tuple[tuple[int, int], dict[str, Any] | None]]) -> RunHistory:
        request = RecordedRequest(step=2, model="m", messages=[], definitions=None, execution="r",
                                  scheduled_event_id=20, task_event_id=19, position=(0, 20))
        return RunHistory(workflow_id="w", input=RunInput(agent="a"), task_queue="q",
                          executions=["r"], requests=[request], states=states)

    def before(run: RunHistory) -> tuple[dict[str, Any] | None, str | None]:
        return run.state_before(run.requests[0])

    assert before(history([((0, 5), {"turns": 1}), ((0, 25), {"turns": 2})])) == (
        {"turns": 1}, None)
    assert before(history([])) == ({}, None)  # recorded from the start: never any state
    assert before(history([((0, 5), None)]))[1] == \
        "the run's state was too large to record at that step"
