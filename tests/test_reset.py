"""`towline reset`: Temporal's reset to the workflow task of a step, with the ledger exact.

One three-step run of `timetravel_agents.shop` (step 1 charges: not idempotent; step 2 looks
up: idempotent) is reset three times, and after each reset its ledger is read back from
the new execution's history, memo and search attributes and compared with what that
execution actually did and with the clean run's snapshots (the script is deterministic,
so a reset run records the very same sequence):

- `towline reset RUN --to-step 2` re-runs the idempotent lookup, without asking;
- `--to-step 1` is refused, naming the charge (exit 1), and nothing changes; with `--yes`
  the charge runs again;
- the raw ResetWorkflowExecution to step 2's workflow task (what the UI's Reset button
  sends), with the event found here independently of towline's own reader.

The second test runs the commands of docs/time-travel.md ("Fork a run", "Reset a run")
exactly as written, and its Python example.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import uuid
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, cli_env, json_of, towline
from readme import REPO, readme
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client
from timetravel_agents import charges, lookups, shop

from examples.calculator import agents as calculator_agents
from towline.client import start_run
from towline.results import Counters, RunResult
from towline.runtime.ledger import counters_from_history, decode_counters
from towline.runtime.search_attributes import RUN_STEP, STATUS, TOOL_CALLS, TOTAL_TOKENS
from towline.testing import towline_worker

MODEL = "towline.model_request"


def _scheduled(events: list[HistoryEvent], prefix: str) -> list[HistoryEvent]:
    return [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name.startswith(prefix)]


def _task_of_step(events: list[HistoryEvent], step: int) -> int:
    """The WorkflowTaskCompleted event before step `step`'s model request is scheduled."""
    task = 0
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task = e.event_id
        elif _scheduled([e], MODEL) and json.loads(e.user_metadata.summary.data).endswith(
                f" · step {step}"):
            return task
    raise AssertionError(f"no step {step} in the history")


async def _ledger_exact(tclient: Client, run_id: str, execution: str, clean: list[Counters]) -> RunResult:
    """The reset execution ran to its end with the ledger the history, memo and search
    attributes agree on, matching what it did."""
    handle = tclient.get_workflow_handle(run_id, run_id=execution, result_type=RunResult)
    result = await handle.result()
    events = list((await handle.fetch_history()).events)
    assert counters_from_history(events) == clean
    c = result.counters
    completed = {e.activity_task_completed_event_attributes.scheduled_event_id for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED}
    assert c.requests == sum(e.event_id in completed for e in _scheduled(events, MODEL)) == 3
    assert c.tool_calls == len(_scheduled(events, "towline.tool.")) == 2
    assert c.run_step == 3 and c.total_tokens == 45
    desc = await handle.describe()
    assert decode_counters(desc.raw_description.workflow_execution_info.memo.fields[
        "towline.counters"]) == c
    found = desc.typed_search_attributes
    assert (found.get(RUN_STEP), found.get(TOOL_CALLS), found.get(TOTAL_TOKENS),
            found.get(STATUS)) == (3, 2, 45, "succeeded")
    return result


async def test_reset_reruns_idempotent_calls_and_refuses_others(client: Client, target: str,
                                                                namespace: str) -> None:
    run_id = f"tt-reset-{uuid.uuid4().hex[:8]}"
    env = cli_env(target, namespace)
    charges.clear()
    lookups.clear()
    async with towline_worker(client, [shop]) as (tclient, queue):
        handle = await start_run(tclient, shop, "buy a widget", task_queue=queue, id=run_id)
        await handle.result()
        clean = counters_from_history((await handle.fetch_history()).events)
        assert len(charges) == len(lookups) == 1

        done = await towline("reset", run_id, "--to-step", "2", "--json", env=env)
        shown = json_of(done)
        assert [(c["tool"], c["idempotent"], c["outcome"]) for c in shown["rerun"]] == [
            ("lookup", True, "succeeded")]
        await _ledger_exact(tclient, run_id, shown["new_execution"], clean)
        assert lookups == [f"{run_id}/2/c2"] * 2 and len(charges) == 1  # same idempotency key

        latest = (await tclient.get_workflow_handle(run_id).describe()).run_id
        refused = await towline("reset", run_id, "--to-step", "1", env=env)
        assert_one_line_error(refused, 1, f"resetting run {run_id!r} to step 1 would run 1 tool "
                              "call again", "(charge)", "--yes")
        assert refused.out.splitlines()[1:] == ['  step 1: charge({"amount": 5}) call c1']
        assert (await tclient.get_workflow_handle(run_id).describe()).run_id == latest

        done = await towline("reset", run_id, "--to-step", "1", "--yes", "--reason",
                             "charge again", "--json", env=env)
        shown = json_of(done)
        assert shown["reset_execution"] == latest  # the run as it stands, not the one it left
        await _ledger_exact(tclient, run_id, shown["new_execution"], clean)
        assert len(charges) == 2 and len(lookups) == 3
        events = list((await tclient.get_workflow_handle(run_id, run_id=shown["new_execution"])
                       .fetch_history()).events)
        assert any(e.workflow_task_failed_event_attributes.failure.message == "charge again"
                   for e in events)

        # what the UI's Reset button sends: the raw API, to step 2's workflow task
        latest = (await tclient.get_workflow_handle(run_id).describe()).run_id
        history = list((await tclient.get_workflow_handle(run_id).fetch_history()).events)
        response = await client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=namespace, workflow_execution=WorkflowExecution(
                    workflow_id=run_id, run_id=latest),
                reason="from the UI", workflow_task_finish_event_id=_task_of_step(history, 2),
                request_id=str(uuid.uuid4())))
        await _ledger_exact(tclient, run_id, response.run_id, clean)
        assert len(charges) == 2 and len(lookups) == 4
        query = (f'WorkflowId = "{run_id}" AND RunId = "{response.run_id}" AND TowlineRunStep = 3'
                 ' AND TowlineToolCalls = 2 AND TowlineTotalTokens = 45 AND TowlineStatus = '
                 '"succeeded"')
        for _ in range(100):  # the visibility store lags a moment behind
            if [w async for w in client.list_workflows(query)]:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the reset run's search attributes never listed as its ledger")


PYTHON_EXAMPLE = '''from towline.client import connect, fork

client = await connect()
handle = await fork(client, "calc-42", at_step=2, prompt="And 6 plus 1?")
print((await handle.result()).output)
'''


async def test_the_time_travel_page_as_written(client: Client, target: str, namespace: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    page = (REPO / "docs" / "time-travel.md").read_text()
    assert f"```python\n{PYTHON_EXAMPLE}```" in page
    env = cli_env(target, namespace)
    # `towline dev --agent examples.calculator:agents` stands here as a worker on its queue
    async with towline_worker(client, calculator_agents, task_queue="towline") as (tclient, _):
        done = await readme('towline run examples.calculator:agent "What is 6 times 7?" --id calc-42 '
                            "--no-worker", env=env)
        assert (done.code, done.out) == (0, "6 times 7 is 42.\n"), done

        done = await readme('towline fork calc-42 --at-step 2 --prompt "And 2 plus 3?" '
                            '--id calc-42-plus --wait', env=env)
        assert (done.code, done.out) == (0, "2 plus 3 is 5.\n"), done
        assert "Forked calc-42 at step 2 as calc-42-plus (agent calculator, task queue " \
               "towline)" in done.err
        done = await readme("towline fork calc-42 --at-step 1 --wait", env=env)
        assert (done.code, done.out) == (0, "6 times 7 is 42.\n"), done

        monkeypatch.setenv("TEMPORAL_ADDRESS", target)
        monkeypatch.setenv("TEMPORAL_NAMESPACE", namespace)
        printed = io.StringIO()
        code = compile(PYTHON_EXAMPLE, "time-travel.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        with contextlib.redirect_stdout(printed):
            await eval(code, {})  # the page's example, as written
        assert printed.getvalue() == "6 plus 1 is 7.\n"

        refused = await readme("towline reset calc-42 --to-step 1", env=env)
        assert_one_line_error(refused, 1, "(multiply); reset anyway with --yes")
        assert '  step 1: multiply({"a": 6.0, "b": 7.0}) call call_1' in refused.out
        done = await readme("towline reset calc-42 --to-step 1 --yes", env=env)
        assert done.code == 0 and "it goes on as execution" in done.out, done
        assert '  step 1: multiply({"a": 6.0, "b": 7.0}) call call_1' in done.out
        result: Any = await tclient.get_workflow_handle("calc-42").result()
        assert result["output"] == "6 times 7 is 42."
        done = await readme('towline reset calc-42 --to-step 2 --reason "phrase it again"', env=env)
        assert done.code == 0 and "it goes on as execution" in done.out, done
        assert "Tool calls that run again" not in done.out  # nothing after step 2's request
        result = await tclient.get_workflow_handle("calc-42").result()
        assert result["output"] == "6 times 7 is 42."
