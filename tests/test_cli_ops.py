"""The operator's commands as real subprocesses, against a dev server holding a mix of runs.

The `fleet` fixture leaves on the session's server one run of each kind an operator meets:
succeeded, failed (`MaxStepsExceeded`), waiting for an approval, running (a tool that blocks
until the test ends) and stuck — a session whose worker was redeployed with workflow code
that no longer replays its history, so its workflow task fails on every attempt. That is user
code towline cannot protect against (a broken deploy), produced the way it happens in
production. `towline runs`, `pending` and `show` must tell them apart.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from cli_helpers import assert_one_line_error, cli_env, json_of, towline, until
from readme import Done
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from examples.calculator import agent as calculator
from examples.calculator import careful_agent
from towline import Agent, Capability, Limits, ModelRequestState, ModelResponse, ToolCallPart, tool
from towline.cli.listing import RunRow
from towline.cli.render import duration, money
from towline.cli.runs import runs_lines
from towline.client import start_run, with_towline
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.runtime.fingerprint import agent_version
from towline.testing import towline_worker

pytestmark = pytest.mark.heavy

release = asyncio.Event()


@tool
async def wait_for_release() -> str:
    """Blocks until the test releases it, so its run stays RUNNING."""
    await release.wait()
    return "released"


def holding_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="wait_for_release", args={},
                                                 tool_call_id="hold_1")])
    return "released"


busy = Agent(name="ops-busy", model=FunctionModel(holding_model, model_name="ops-holding"),
             tools=[wait_for_release])


def echo(messages: list[Message], info: ModelInfo) -> str:
    return f"answered {len(messages)} messages"


class PauseFirst(Capability):
    """The redeploy's change: a timer before each model request, which old histories lack."""

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await workflow.sleep(timedelta(milliseconds=10))
        return state


deployed = Agent(name="ops-deploy", model=FunctionModel(echo, model_name="ops-echo"))
redeployed = Agent(name="ops-deploy", model=FunctionModel(echo, model_name="ops-echo"),
                   capabilities=[PauseFirst()])


@dataclass
class Fleet:
    prefix: str
    queue: str
    ids: dict[str, str]
    env: dict[str, str]

    @property
    def query(self) -> str:
        """A list filter matching this fleet's runs only (other tests share the server)."""
        return f'WorkflowId STARTS_WITH "{self.prefix}"'


async def _state(handle: WorkflowHandle[Any, Any], ready: Callable[[dict[str, Any]], bool]) -> None:
    for _ in range(600):
        state: dict[str, Any] = await handle.query("state")
        if ready(state):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.id} never reached the expected state")


async def _stuck_run(client: Client, queue: str, workflow_id: str, stack: AsyncExitStack) -> WorkflowHandle[Any, Any]:
    async with towline_worker(client, [deployed], task_queue=queue) as (tclient, _):
        handle = await start_run(tclient, deployed, "hello", task_queue=queue, id=workflow_id,
                                 session=True)
        await _state(handle, lambda s: s.get("status") == "waiting")
    # The broken deploy: the old version accepted (as if compatible) without a replay test.
    await stack.enter_async_context(
        towline_worker(client, [redeployed], task_queue=queue, max_cached_workflows=0,
                       accept_versions=[agent_version(deployed)]))
    await handle.signal("cancel")  # any new event makes the new worker replay the history
    for _ in range(600):
        if (await handle.describe()).raw_description.pending_workflow_task.attempt > 1:
            return handle
        await asyncio.sleep(0.1)
    raise AssertionError("the redeployed run's workflow task never failed")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(client: Client, target: str, namespace: str) -> AsyncIterator[Fleet]:
    prefix = f"ops-{uuid.uuid4().hex[:8]}"
    queue = f"tq-{prefix}"
    ids = {role: f"{prefix}-{role}"
           for role in ("succeeded", "failed", "waiting", "running", "stuck")}
    release.clear()
    async with AsyncExitStack() as stack:
        tclient, _ = await stack.enter_async_context(
            towline_worker(client, [calculator, careful_agent, busy], task_queue=queue))
        ok = await start_run(tclient, calculator, "What is 6 times 7?", task_queue=queue,
                             id=ids["succeeded"])
        await ok.result()
        failed = await start_run(tclient, calculator, "What is 6 times 7?", task_queue=queue,
                                 id=ids["failed"], limits=Limits(max_steps=1))
        with pytest.raises(WorkflowFailureError):
            await failed.result()
        waiting = await start_run(tclient, careful_agent, "What is 6 times 7?", task_queue=queue,
                                  id=ids["waiting"])
        await _state(waiting, lambda s: bool(s.get("pending_approvals")))
        running = await start_run(tclient, busy, "hold on", task_queue=queue, id=ids["running"])
        await _state(running, lambda s: (s.get("counters") or {}).get("tool_calls") == 1)
        stuck = await _stuck_run(client, f"{queue}-deploy", ids["stuck"], stack)
        try:
            yield Fleet(prefix, queue, ids, cli_env(target, namespace))
        finally:
            for handle in (stuck, waiting, running):
                await handle.terminate(reason="test over")
            release.set()


def _rows(done: Done) -> dict[str, dict[str, Any]]:
    return {row["workflow_id"]: row for row in json_of(done)}


# --- towline runs --------------------------------------------------------------------------


async def test_runs_lists_every_kind_of_run_live_ones_first(fleet: Fleet) -> None:
    ids = fleet.ids
    want = {ids["succeeded"]: "succeeded", ids["failed"]: "failed", ids["waiting"]: "waiting",
            ids["running"]: "running", ids["stuck"]: "waiting"}

    async def listed() -> Done:
        return await towline("runs", "--query", fleet.query, "--json", env=fleet.env)

    done = await until(listed, lambda d: d.code == 0 and {
        r["workflow_id"]: r["status"] for r in json.loads(d.out)} == want,
        "the five runs with their statuses")
    rows = _rows(done)
    order = [r["workflow_id"] for r in json_of(done)]
    live = {ids["waiting"], ids["running"], ids["stuck"]}
    assert set(order[:3]) == live  # live runs first, then closed ones
    ok = rows[ids["succeeded"]]
    assert (ok["agent"], ok["run_step"], ok["tool_calls"], ok["total_tokens"]) == ("calculator", 2, 1, 30)
    assert ok["closed"] is not None and ok["duration_seconds"] >= 0
    assert ok["cost_micros"] is None  # the offline model has no price
    assert rows[ids["failed"]]["run_step"] == 1
    assert rows[ids["waiting"]]["agent"] == "careful-calculator"
    assert rows[ids["running"]]["closed"] is None
    started = [datetime.fromisoformat(r["started"]) for r in json_of(done)[:3]]
    assert started == sorted(started, reverse=True)  # newest first among the live runs

    table = await towline("runs", "--query", fleet.query, env=fleet.env)
    assert table.code == 0, table
    lines = table.out.splitlines()
    assert lines[0].split() == ["WORKFLOW", "ID", "AGENT", "STATUS", "STEP", "TOOL", "CALLS",
                                "TOKENS", "COST", "STARTED", "DURATION", "VERSION"]
    ok_line = next(line for line in lines if line.startswith(ids["succeeded"]))
    assert ok_line.split()[1:7] == ["calculator", "succeeded", "2", "1", "30", "-"]


@pytest.mark.parametrize(
    ("options", "roles"),
    [
        (["--status", "waiting"], {"waiting", "stuck"}),
        (["--status", "running"], {"running"}),
        (["--status", "succeeded"], {"succeeded"}),
        (["--status", "failed"], {"failed"}),
        (["--agent", "careful-calculator"], {"waiting"}),
        (["--agent", "calculator", "--status", "failed"], {"failed"}),
    ],
)
async def test_runs_filters_by_status_and_agent(fleet: Fleet, options: list[str], roles: set[str]) -> None:
    want = {fleet.ids[r] for r in roles}

    async def listed() -> Done:
        return await towline("runs", *options, "--query", fleet.query, "--json", env=fleet.env)

    await until(listed, lambda d: d.code == 0 and set(_rows(d)) == want, f"exactly {roles}")


async def test_runs_limit_bad_query_and_bad_status(fleet: Fleet) -> None:
    limited = await towline("runs", "--query", fleet.query, "--limit", "2", "--json", env=fleet.env)
    assert len(json_of(limited)) == 2
    bad = await towline("runs", "--query", "WorkflowId ==== nonsense", env=fleet.env)
    assert_one_line_error(bad, 2, "invalid --query")
    wrong = await towline("runs", "--status", "asleep", env=fleet.env)
    assert wrong.code == 2 and "invalid choice: 'asleep'" in wrong.err
    none = await towline("runs", "--query", 'WorkflowId = "no-such-run-anywhere"', env=fleet.env)
    assert none.code == 0 and none.out == "No runs match.\n"


async def test_runs_stuck_finds_the_run_whose_workflow_task_keeps_failing(fleet: Fleet) -> None:
    done = await towline("runs", "--stuck", "--query", fleet.query, "--json", env=fleet.env)
    stuck = json_of(done)
    assert [s["workflow_id"] for s in stuck] == [fleet.ids["stuck"]]
    assert stuck[0]["attempt"] > 1
    assert stuck[0]["cause"] == "NON_DETERMINISTIC_ERROR"
    assert "Nondeterminism" in stuck[0]["failure"]
    assert stuck[0]["agent"] == "ops-deploy"

    table = await towline("runs", "--stuck", "--query", fleet.query, env=fleet.env)
    assert table.code == 0, table
    line = next(x for x in table.out.splitlines() if x.startswith(fleet.ids["stuck"]))
    assert "ops-deploy" in line and "NON_DETERMINISTIC_ERROR: [TMPRL1100] Nondeterminism" in line
    assert "temporal workflow terminate" in table.out

    others = await towline("runs", "--stuck", "--query", fleet.query, "--agent", "ops-busy",
                           env=fleet.env)
    assert others.code == 0 and others.out.startswith("No stuck runs")


# --- towline pending -----------------------------------------------------------------------


async def test_pending_lists_waiting_calls_with_how_long_they_waited(fleet: Fleet) -> None:
    done = await until(
        lambda: towline("pending", "--query", fleet.query, "--json", env=fleet.env),
        lambda d: d.code == 0 and len(json.loads(d.out)) == 1, "the waiting call")
    (call,) = json_of(done)
    assert (call["workflow_id"], call["call_id"], call["tool_name"]) == (
        fleet.ids["waiting"], "call_1", "multiply")
    assert call["args"] == {"a": 6.0, "b": 7.0} and call["run_step"] == 1
    requested = datetime.fromisoformat(call["requested_at"])
    assert requested.tzinfo is not None and call["waited_seconds"] >= 0
    # the stuck run is `waiting` too, but its worker cannot answer for it: said on stderr
    assert f"note: no answer from run '{fleet.ids['stuck']}': the state query got no answer" in done.err

    table = await towline("pending", "--query", fleet.query, env=fleet.env)
    assert table.code == 0, table
    header, row = table.out.splitlines()[:2]
    assert header.split() == ["WORKFLOW", "ID", "#", "CALL", "ID", "TOOL", "ARGUMENTS", "FOR",
                              "WAITING", "DIGEST"]
    assert row.split()[:7] == [fleet.ids["waiting"], "1", "call_1", "multiply", "a=6.0,", "b=7.0",
                               "approval"]
    assert row.split()[-1] == call["digest"] and call["index"] == 1 and call["kind"] == "approval"

    nothing = await towline("pending", "--query", fleet.query, "--agent", "ops-busy", env=fleet.env)
    assert nothing.code == 0 and nothing.out == "No tool calls are waiting for approval.\n"


# --- towline show --------------------------------------------------------------------------


async def test_show_reports_pending_calls_failures_stuck_tasks_and_json(fleet: Fleet) -> None:
    ids, env = fleet.ids, fleet.env
    waiting = await towline("show", ids["waiting"], env=env)
    assert waiting.code == 0, waiting
    assert "Run state waiting" in waiting.out
    assert "Agent     careful-calculator" in waiting.out
    assert f"(version {agent_version(careful_agent)})" in waiting.out
    assert ("Waiting for approval: multiply(a=6.0, b=7.0)  call id call_1  waiting "
            in waiting.out)
    assert f"(towline approve {ids['waiting']} call_1)" in waiting.out

    stuck = await towline("show", ids["stuck"], env=env)
    assert stuck.code == 0, stuck
    assert "Stuck     workflow task attempt " in stuck.out
    assert "NON_DETERMINISTIC_ERROR: [TMPRL1100] Nondeterminism" in stuck.out

    failed = json_of(await towline("show", ids["failed"], "--json", env=env))
    assert failed["status"] == "failed" and failed["execution_status"] == "FAILED"
    assert failed["failure"]["reason"] == "MaxStepsExceeded"
    assert failed["counters"]["run_step"] == 1 and failed["counters"]["tool_calls"] == 1
    assert failed["pending_approvals"] == [] and failed["stuck"] is None

    ok = json_of(await towline("show", ids["succeeded"], "--json", env=env))
    assert ok["output"] == "6 times 7 is 42." and ok["status"] == "succeeded"
    assert [m["kind"] for m in ok["messages"]] == ["request", "response", "request", "response"]

    live = json_of(await towline("show", ids["waiting"], "--json", env=env))
    (pending,) = live["pending_approvals"]
    assert pending["call_id"] == "call_1" and pending["waited_seconds"] >= 0
    assert live["status"] == "waiting" and live["output"] is None


# --- run --id, and steering without a worker ------------------------------------------------


async def test_run_refuses_an_existing_id_unless_allowed(fleet: Fleet) -> None:
    env, wid = fleet.env, f"{fleet.prefix}-again"
    args = ("run", "examples.calculator:agent", "What is 2 plus 3?", "--no-worker",
            "--task-queue", fleet.queue, "--id", wid)
    first = await towline(*args, env=env)
    assert first.code == 0 and first.out == "2 plus 3 is 5.\n", first
    again = await towline(*args, env=env)
    assert_one_line_error(again, 1, f"a run with id {wid!r} already exists (COMPLETED",
                          "--allow-duplicate")
    allowed = await towline(*args, "--allow-duplicate", env=env)
    assert allowed.code == 0 and allowed.out == "2 plus 3 is 5.\n", allowed
    live = await towline("run", "examples.calculator:agent", "What is 2 plus 3?", "--no-worker",
                         "--task-queue", fleet.queue, "--id", fleet.ids["waiting"],
                         "--allow-duplicate", env=env)
    assert_one_line_error(live, 1, f"run {fleet.ids['waiting']!r} is still running")


async def test_approve_with_no_worker_says_so_and_what_to_start(
    client: Client, target: str, namespace: str
) -> None:
    env = cli_env(target, namespace)
    nobody = f"tq-nobody-{uuid.uuid4().hex[:8]}"
    handle = await start_run(with_towline(client), careful_agent, "What is 6 times 7?",
                             task_queue=nobody)
    try:
        done = await towline("approve", handle.id, "call_1", env=env)
        assert_one_line_error(done, 1, f"no worker is polling task queue {nobody!r}",
                              "towline worker --agent MODULE:ATTR", "careful-calculator")
        sent = await towline("send", handle.id, "hello", env=env)
        assert_one_line_error(sent, 1, f"no worker is polling task queue {nobody!r}")
        cancelled = await towline("cancel", handle.id, env=env)
        assert cancelled.code == 0, cancelled
        assert f"cancel requested for run {handle.id}" in cancelled.out
        assert f"note: no worker is polling task queue {nobody!r}" in cancelled.err
    finally:
        await handle.terminate(reason="test over")


async def test_approve_when_the_worker_just_stopped_times_out_with_a_hint(
    client: Client, target: str, namespace: str
) -> None:
    env = cli_env(target, namespace)
    async with towline_worker(client, [careful_agent]) as (tclient, queue):
        handle = await start_run(tclient, careful_agent, "What is 6 times 7?", task_queue=queue)
        await _state(handle, lambda s: bool(s.get("pending_approvals")))
    try:  # the server still lists the stopped worker as a poller: only the wait can tell
        done = await towline("approve", handle.id, "call_1", "--wait", "3", env=env)
        # the server holds the approval: pending (exit 3), not failed (tests/test_i40_decision_delivery.py)
        assert done.code == 3 and len(done.err.strip().splitlines()) == 1, done
        assert done.err.startswith("towline: pending: approve pending: the Temporal server holds "
                                   "it, but no worker took it within 3s"), done
        assert f"--task-queue {queue}" in done.err, done
    finally:
        await handle.terminate(reason="test over")


async def test_unreachable_and_malformed_addresses_are_named() -> None:
    done = await towline("runs", env=cli_env("no-such-host.invalid:7233"))
    assert_one_line_error(done, 1, "cannot reach the Temporal server at no-such-host.invalid:7233",
                          "the host name does not resolve")
    bad = await towline("pending", "--address", "bad:address:1", env=cli_env("localhost:7233"))
    assert_one_line_error(bad, 2, "invalid Temporal address 'bad:address:1'")


async def test_steering_an_ended_or_unknown_run_is_refused(fleet: Fleet) -> None:
    env = fleet.env
    ended = await towline("send", fleet.ids["succeeded"], "hello", env=env)
    assert_one_line_error(ended, 1, f"run {fleet.ids['succeeded']!r} has ended (COMPLETED)")
    gone = await towline("cancel", "no-such-run-anywhere", env=env)
    assert_one_line_error(gone, 1, "no workflow 'no-such-run-anywhere'")
    empty = await towline("send", fleet.ids["waiting"], "   ", env=env)
    assert_one_line_error(empty, 2, "the message is empty")


# --- rendering -----------------------------------------------------------------------------


def test_cost_and_durations_render_exactly() -> None:
    assert [money(m) for m in (None, 0, 1234, 1_500_000, 12_345_678)] == [
        "-", "$0.00", "$0.001234", "$1.50", "$12.345678"]
    assert [duration(timedelta(seconds=s)) for s in (0.2, 42, 185, 7620, 273600)] == [
        "<1s", "42s", "3m05s", "2h07m", "3d04h"]
    now = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)
    row = RunRow(workflow_id="r-1", run_id="x", agent="a", status="succeeded", run_step=3,
                 tool_calls=2, total_tokens=900, cost_micros=1234, task_queue="q",
                 started=now - timedelta(seconds=65), closed=now - timedelta(seconds=5))
    header, line = runs_lines([row], now)
    assert header.split()[-4:] == ["COST", "STARTED", "DURATION", "VERSION"]
    assert line.split()[:7] == ["r-1", "a", "succeeded", "3", "2", "900", "$0.001234"]
    assert line.split()[-2:] == ["1m00s", "-"]  # no version: a run from before versions
    assert row.to_json(now)["cost_micros"] == 1234

