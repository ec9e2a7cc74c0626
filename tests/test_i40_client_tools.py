"""Client tools, issue 40, in real runs: a client tool may not take the place of a server tool
(of the agent, of an agent it hands the run to, across continue-as-new) nor of the reserved
`final_result`; the client's tools stay the run's across a handoff; a call's wait is bounded by
its tool's `timeout` and by a session's `session_timeout`; a client answers with an error or a
retry request, which the model sees; a client tool's metadata goes with each pending call."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from hitl_agents import script, steps_prompt
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from test_serve_agui_client import _sse  # pyright: ignore[reportPrivateUsage]

from towline import Agent, tool
from towline.capabilities import Handoff
from towline.client import events, run_error, start_run
from towline.models import FunctionModel
from towline.results import ClientToolSpec, RunInput, RunResult
from towline.review import PendingApproval, pending, tool_result
from towline.serve.agui import TurnMapper
from towline.serve.app import ServeConfig, create_app
from towline.testing import execution_histories, towline_worker

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

BOUND = 60.0
"""Seconds a test waits for a run's end: the old code's runs wait for their client forever."""


@tool
def refund(order: str) -> str:
    """Refund an order (the billing agent's server tool)."""
    return f"the server refunded {order}"


@tool(executor="client", metadata={"widget": "color-wheel", "title": "Pick a color"})
def pick_shade(prompt: str) -> dict[str, str]:
    """Let the user pick a shade in the browser (the client runs it)."""
    raise NotImplementedError  # never runs: the client answers


billing = Agent(name="i40-billing", model=FunctionModel(script, model_name="i40-billing"),
                tools=[refund])
triage = Agent(name="i40-triage", model=FunctionModel(script, model_name="i40-triage"),
               capabilities=[Handoff(billing)])
desk = Agent(name="i40-desk", model=FunctionModel(script, model_name="i40-desk"),
             tools=[pick_shade])
AGENTS = [triage, desk]

CHOOSE = ClientToolSpec(name="choose_file", description="Let the user choose a file",
                        parameters={"type": "object", "properties": {"kind": {"type": "string"}}})


async def _ended(handle: WorkflowHandle[Any, Any]) -> RunResult:
    return await asyncio.wait_for(handle.result(), BOUND)


async def _failure(handle: WorkflowHandle[Any, Any]) -> tuple[str, str]:
    with pytest.raises(WorkflowFailureError) as failed:
        await _ended(handle)
    err = run_error(failed.value)
    return err.reason, err.message


async def _first_pending(handle: WorkflowHandle[Any, Any], *, after: str | None = None) -> PendingApproval:
    for _ in range(600):
        calls = [c for c in await pending(handle) if c.call_id != after]
        if calls:
            return calls[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no client call became pending")


async def test_a_client_tool_may_not_shadow_a_handoff_targets_tool(client: Client) -> None:
    # The client offers `refund`; triage has none, but hands the run to billing, whose server
    # tool it is. The run continues-as-new after every step, so the model's `refund` comes in
    # the execution that took the run over as billing: before, the client's tool had replaced
    # the server's there, and the call waited for the client.
    prompt = steps_prompt([("transfer_to_i40_billing", {})], [("refund", {"order": "A1"})])
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await tc.start_workflow(
            "AgentRun", RunInput(agent=triage.name, prompt=prompt, continue_as_new_after_events=1,
                                 client_tools=[ClientToolSpec(name="refund")]),
            id=f"i40-shadow-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
        ended = asyncio.ensure_future(_failure(handle))
        while not ended.done():  # the old code's call waits for the client: answered, it ends
            waiting = [c for c in await pending(handle) if c.kind == "client"]
            assert not waiting, f"the server's tool waits for the client: {waiting}"
            await asyncio.sleep(0.05)
        reason, message = await ended
    assert reason == "InvalidRunInput"
    assert "client tool 'refund'" in message and "'i40-billing'" in message, message
    assert "which the run may be handed to" in message


async def test_the_reserved_output_tool_name_is_refused(client: Client) -> None:
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await start_run(tc, desk, steps_prompt(), task_queue=queue,
                                 client_tools=[ClientToolSpec(name="final_result")])
        reason, message = await _failure(handle)
    assert reason == "InvalidRunInput"
    assert "client tool 'final_result'" in message and "reserved" in message, message


async def test_the_clients_tools_stay_the_runs_across_a_handoff(client: Client) -> None:
    prompt = steps_prompt([("transfer_to_i40_billing", {})], [("choose_file", {"kind": "pdf"})])
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await start_run(tc, triage, prompt, task_queue=queue, client_tools=[CHOOSE])
        ended = asyncio.ensure_future(_ended(handle))
        call: PendingApproval | None = None
        while call is None and not ended.done():
            calls = await pending(handle)
            call = calls[0] if calls else None
            await asyncio.sleep(0.05)
        assert call is not None, "the client's tool was gone after the handoff"
        assert (call.tool_name, call.kind) == ("choose_file", "client")
        await tool_result(handle, call.call_id, {"path": "/tmp/a.pdf"}, digest=call.digest)
        result = await ended
    assert result.output == ("transfer_to_i40_billing=succeeded:Transferred to i40-billing: it "
                             "handles the conversation from here.; "
                             "choose_file=succeeded:{'path': '/tmp/a.pdf'}")
    assert [h.to_agent for h in result.handoffs] == ["i40-billing"]


async def test_a_sessions_call_waits_at_most_its_session_timeout(client: Client) -> None:
    # A front end that went away never answers: the session's own timeout ends the wait (the
    # call's effect is unknown: the run fails UncertainToolEffect, with its partial run).
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await tc.start_workflow(
            "AgentRun", RunInput(agent=desk.name, prompt=steps_prompt([("choose_file", {})]),
                                 session=True, session_timeout=timedelta(seconds=2),
                                 client_tools=[CHOOSE]),
            id=f"i40-session-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
        reason, message = await _failure(handle)
        assert handle.first_execution_run_id is not None
        history = (await execution_histories(tc, handle.id, handle.first_execution_run_id))[-1]
    assert reason == "UncertainToolEffect"
    assert "no result from the client within 0:00:02 (the session's session_timeout)" in message
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert timers == [timedelta(seconds=2)]  # the wait's one timer: the session's


async def test_a_client_tools_own_timeout_and_idempotence(client: Client) -> None:
    locate = ClientToolSpec(name="locate", timeout=timedelta(milliseconds=500), idempotent=True)
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await start_run(tc, desk, steps_prompt([("locate", {})]), task_queue=queue,
                                 client_tools=[locate])
        result = await _ended(handle)
    assert result.output == "locate=denied:no result from the client within 0:00:00.500000"


async def test_a_client_answers_with_a_retry_request_or_an_error(client: Client) -> None:
    prompt = steps_prompt([("choose_file", {"kind": "any"})], [("choose_file", {"kind": "pdf"})],
                          [("choose_file", {"kind": "pdf"})])
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await start_run(tc, desk, prompt, task_queue=queue, client_tools=[CHOOSE])
        first = await _first_pending(handle)
        answered = await tool_result(handle, first.call_id, retry="ask for a pdf only")
        assert answered["decision"] == "retry"
        second = await _first_pending(handle, after=first.call_id)
        await tool_result(handle, second.call_id, {"path": "/tmp/b.pdf"})
        third = await _first_pending(handle, after=second.call_id)
        await tool_result(handle, third.call_id, error="the file dialog crashed")
        result = await _ended(handle)
        state: dict[str, Any] = await handle.query("state")
    assert result.output == ("choose_file=retry:ask for a pdf only; "
                             "choose_file=succeeded:{'path': '/tmp/b.pdf'}; "
                             "choose_file=failed:the file dialog crashed")
    answers = [(e["decision"], e.get("reason")) for e in state["decisions"]]
    assert answers == [("retry", "ask for a pdf only"), ("result", None),
                       ("error", "the file dialog crashed")]


async def test_client_errors_count_against_the_tools_retries(client: Client) -> None:
    prompt = steps_prompt([("choose_file", {})], [("choose_file", {})])
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await start_run(tc, desk, prompt, task_queue=queue, client_tools=[CHOOSE])
        first = await _first_pending(handle)
        await tool_result(handle, first.call_id, error="no disk")
        second = await _first_pending(handle, after=first.call_id)
        await tool_result(handle, second.call_id, retry="try again")
        reason, message = await _failure(handle)
    assert reason == "ToolRetriesExhausted"
    assert "'choose_file' failed 2 times in a row (max_retries 1)" in message


async def test_a_client_tools_metadata_goes_with_its_pending_call(client: Client) -> None:
    spec = CHOOSE.model_copy(update={"metadata": {"accept": [".pdf"], "title": "Your report"}})
    prompt = steps_prompt([("pick_shade", {"prompt": "which?"}), ("choose_file", {})])
    async with towline_worker(client, AGENTS) as (tc, queue):
        handle = await start_run(tc, desk, prompt, task_queue=queue, client_tools=[spec])
        calls: list[PendingApproval] = []
        for _ in range(600):
            calls = await pending(handle)
            if len(calls) == 2:
                break
            await asyncio.sleep(0.05)
        shown = {c.tool_name: c.metadata for c in calls}
        assert shown == {"pick_shade": {"widget": "color-wheel", "title": "Pick a color"},
                         "choose_file": {"accept": [".pdf"], "title": "Your report"}}
        state: dict[str, Any] = await handle.query("state")
        assert {e["tool_name"]: e["metadata"] for e in state["pending_approvals"].values()} == shown
        for c in calls:
            await tool_result(handle, c.call_id, {"picked": "yes"})
        await _ended(handle)
        seen = [e async for e in events(handle)]
    announced = {e.field("tool"): e.field("metadata") for e in seen if e.type == "client_tool"}
    assert announced == shown
    # what `towline serve` sends a front end: the event, as a CUSTOM `towline.client_tool`
    mapper = TurnMapper(handle.id, "thread", "turn")
    custom = [a for e in seen if e.type == "client_tool" for a in mapper.map(e)
              if getattr(a, "name", "") == "towline.client_tool"]
    assert {c.value["tool"]: c.value["metadata"] for c in custom} == shown  # pyright: ignore[reportAttributeAccessIssue]


# --- towline serve: a front end's tools ------------------------------------------------------

FRONT_TOOLS = [{"name": "choose_file", "description": "Let the user choose a file",
                "parameters": {"type": "object", "properties": {}}}]


async def _turn(http: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    return await _sse(http, f"/agents/{desk.name}", body)


async def test_a_front_end_answers_with_an_error_and_a_page_left_open_ends(client: Client) -> None:
    user = {"id": "m1", "role": "user", "content": steps_prompt([("choose_file", {})])}
    async with towline_worker(client, AGENTS) as (tc, queue):
        for timeout in (None, timedelta(seconds=2)):
            app = create_app(ServeConfig(client=tc, agents=[desk], task_queue=queue,
                                         session_timeout=timeout))
            transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
            thread = f"i40-front-{uuid.uuid4().hex[:8]}"
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                         timeout=60) as http:
                first = await _turn(http, {"threadId": thread, "runId": "r1", "messages": [user],
                                           "tools": FRONT_TOOLS})
                assert first[-1]["type"] == "RUN_FINISHED", first[-1]
                (call_id,) = first[-1]["outcome"]["pendingToolCallIds"]
                if timeout is not None:
                    break  # the page is left open: nobody answers
                answered = await _turn(http, {
                    "threadId": thread, "runId": "r2", "tools": FRONT_TOOLS, "messages": [
                        user, {"id": "t1", "role": "tool", "toolCallId": call_id, "content": "",
                               "error": "the file dialog crashed"}]})
            assert answered[-1]["type"] == "RUN_FINISHED", answered[-1]
            assert answered[-1]["result"] == "choose_file=failed:the file dialog crashed"
        # the run of the page left open ends by the session's own timeout, not never
        reason, message = await _failure(tc.get_workflow_handle(thread, result_type=RunResult))
    assert reason == "UncertainToolEffect"
    assert "within 0:00:02 (the session's session_timeout)" in message
