"""Issue 40's client gaps, through the CLI and `towline serve` as subprocesses: `towline respond
--error` / `--retry` answer a client tool's call; `towline pending` shows a call's metadata,
escaped; `towline serve --session-timeout` bounds a thread's run's waits; serve's REST decision
and an AG-UI resume carry a rejection's `message`, the text the model sees."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cli_helpers import TESTS_ON_PATH, towline, until
from hitl_agents import desk as hitl_desk
from hitl_agents import script, steps_prompt
from readme import cli_env, readme, readme_process
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from test_serve import _serving, _stop  # pyright: ignore[reportPrivateUsage]
from test_serve_agui_client import _sse  # pyright: ignore[reportPrivateUsage]

from towline import Agent
from towline.client import start_run
from towline.models import FunctionModel
from towline.results import ClientToolSpec, RunResult
from towline.review import PendingApproval, pending
from towline.runtime.plugin import TowlinePlugin
from towline.testing import execution_histories, towline_worker

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(180)]

desk = Agent(name="i40-gaps-desk", model=FunctionModel(script, model_name="i40-gaps-desk"))
CHOOSE = ClientToolSpec(name="choose_file", description="Let the user choose a file",
                        parameters={"type": "object", "properties": {"kind": {"type": "string"}}})


@pytest_asyncio.fixture
async def tclient(target: str, namespace: str) -> AsyncIterator[Client]:
    yield await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])


async def _waiting(handle: WorkflowHandle[Any, Any], after: set[str] | None = None) -> PendingApproval:
    for _ in range(600):
        calls = [c for c in await pending(handle) if c.call_id not in (after or set())]
        if calls:
            return calls[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no call became pending")


async def _ended(handle: WorkflowHandle[Any, Any]) -> RunResult:
    return await asyncio.wait_for(handle.result(), 60)


async def test_respond_error_and_retry_answer_a_client_call_from_the_cli(
        client: Client, target: str) -> None:
    env = cli_env(target)
    prompt = steps_prompt([("choose_file", {"kind": "any"})], [("choose_file", {"kind": "pdf"})],
                          [("choose_file", {"kind": "pdf"})])
    async with towline_worker(client, [desk, hitl_desk]) as (tc, queue):
        handle = await start_run(tc, desk, prompt, task_queue=queue, client_tools=[CHOOSE])
        first = await _waiting(handle)
        both = await towline("respond", handle.id, "--result", "{}", "--error", "x", env=env)
        assert both.code == 2 and "not allowed with argument" in both.err, both
        neither = await towline("respond", handle.id, env=env)
        assert neither.code == 2 and "one of the arguments --result --error --retry" in neither.err
        done = await towline("respond", handle.id, "--retry", "ask for a pdf only", env=env)
        assert done.code == 0, done
        assert done.out.startswith(f"asked the model to retry tool call {first.call_id} in run "
                                   f"{handle.id}: #1 choose_file("), done.out
        second = await _waiting(handle, {first.call_id})
        done = await towline("respond", handle.id, second.call_id, "--result",
                             '{"path": "/tmp/b.pdf"}', env=env)
        assert done.code == 0, done
        third = await _waiting(handle, {first.call_id, second.call_id})
        done = await towline("respond", handle.id, f"#{third.index}", "--error",
                             "the file dialog crashed", "--by", "page-7", env=env)
        assert done.code == 0, done
        assert done.out.startswith(f"gave the error of tool call {third.call_id}"), done.out
        result = await _ended(handle)
        state: dict[str, Any] = await handle.query("state")

        # a call waiting for approval takes no client answer: refused, nothing sent
        asked = await start_run(tc, hitl_desk, steps_prompt([("delete", {"path": "/tmp/x"})]),
                                task_queue=queue)
        call = await _waiting(asked)
        refused = await towline("respond", asked.id, call.call_id, "--error", "no", env=env)
        assert refused.code == 2, refused
        assert "--error answers a client tool's call" in refused.err, refused
        assert [c.call_id for c in await pending(asked)] == [call.call_id]  # still waiting
        await asked.cancel()
    assert result.output == ("choose_file=retry:ask for a pdf only; "
                             "choose_file=succeeded:{'path': '/tmp/b.pdf'}; "
                             "choose_file=failed:the file dialog crashed")
    answers = [(e["decision"], e.get("reason"), e.get("by")) for e in state["decisions"]]
    assert answers == [("retry", "ask for a pdf only", None), ("result", None, None),
                       ("error", "the file dialog crashed", "page-7")]


async def test_the_client_tools_page_error_command(client: Client, target: str) -> None:
    from examples.frontend import agent

    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "pick one", task_queue=queue, id="front-2")
        await _waiting(handle)
        done = await readme('towline respond front-2 pick_1 --error "the color picker crashed"',
                            env=cli_env(target))
        assert done.code == 0, done
        result = await _ended(handle)
    assert result.output == "The color picker failed: the color picker crashed"


async def test_pending_shows_a_calls_metadata_escaped(client: Client, target: str) -> None:
    spec = CHOOSE.model_copy(update={"metadata": {
        "accept": [".pdf"], "title": "Your\nfile \u202ec \x1b[1m"}})
    async with towline_worker(client, [desk]) as (tc, queue):
        handle = await start_run(tc, desk, steps_prompt([("choose_file", {"kind": "pdf"})]),
                                 task_queue=queue, client_tools=[spec])
        call = await _waiting(handle)
        done = await until(
            lambda: towline("pending", "--query", f"WorkflowId = '{handle.id}'", env=cli_env(target)),
            lambda d: handle.id in d.out, "the waiting run in towline pending")
        await handle.cancel()
    header, row = done.out.splitlines()[:2]
    assert header.split()[-1] == "METADATA", done.out
    assert row.startswith(handle.id) and call.call_id in row
    shown = row[header.index("METADATA"):]
    assert shown == '{"accept": [".pdf"], "title": "Your\\nfile \\u202ec \\u001b[1m"}', shown
    assert not any(c in done.out for c in "\x1b\u202e")  # nothing reaches the terminal raw


# --- towline serve ---------------------------------------------------------------------------


async def _answer(handle: WorkflowHandle[Any, Any]) -> str:
    """The session's latest answer, once it has one (its `messages` query)."""
    for _ in range(400):
        messages: list[dict[str, Any]] = await handle.query("messages")
        last = messages[-1] if messages else {}
        texts = [p["content"] for p in last.get("parts", []) if p.get("part_kind") == "text"]
        if texts:
            return "".join(texts)
        await asyncio.sleep(0.05)
    raise AssertionError("the session never answered")


async def test_serve_session_timeout_bounds_a_front_end_tools_wait(
        tclient: Client, target: str, namespace: str) -> None:
    process = await readme_process(
        "towline serve --session-timeout 600 --agent examples.frontend:web_agent",
        env=cli_env(target, namespace))
    try:
        base = await _serving(process)
        thread = f"i40-gaps-front-{uuid.uuid4().hex[:8]}"
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            events = await _sse(http, "/agents/frontend-web", {
                "threadId": thread, "runId": "r1", "state": None, "context": [],
                "forwardedProps": None,
                "messages": [{"id": "m1", "role": "user", "content": "Pick a color"}],
                "tools": [{"name": "pick_color", "description": "Show a color picker",
                           "parameters": {"type": "object",
                                          "properties": {"prompt": {"type": "string"}}}}]})
        assert any(e["type"] == "TOOL_CALL_START" and e["toolCallName"] == "pick_color"
                   for e in events), events
        handle = tclient.get_workflow_handle(thread)
        await _waiting(handle)
        described = await handle.describe()
        histories = await execution_histories(tclient, thread, described.run_id or "")
    finally:
        await _stop(process)
    timers = [e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
              for e in histories[-1].events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert timers == [timedelta(seconds=600)]  # the call's wait: the serve's session timeout


async def test_serve_rejections_carry_the_message_the_model_sees(
        tclient: Client, target: str, namespace: str) -> None:
    queue = f"i40-gaps-{uuid.uuid4().hex[:8]}"
    env = cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})
    process = await asyncio.create_subprocess_exec(  # its own process group, as `_stop` signals
        sys.executable, "-m", "towline.cli", "serve", "--agent", "hitl_agents:desk",
        "--task-queue", queue, env=env, start_new_session=True, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    told = "Deleting is off today: ask the user first."
    try:
        base = await _serving(process)
        prompt = steps_prompt([("delete", {"path": "/tmp/x"})])
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            # the REST decision
            rest = f"i40-gaps-rest-{uuid.uuid4().hex[:8]}"
            await _sse(http, "/agents/hitl-desk", {
                "threadId": rest, "runId": "r1", "messages": [
                    {"id": "m1", "role": "user", "content": prompt}]})
            handle = tclient.get_workflow_handle(rest)
            call = await _waiting(handle)
            wrong = await http.post(f"/runs/{rest}/approvals/{call.call_id}", json={
                "decision": "approve", "message": told})
            assert wrong.status_code == 422, wrong.text
            assert "what the model is told of a rejection" in wrong.json()["error"]
            decided = await http.post(f"/runs/{rest}/approvals/{call.call_id}", json={
                "decision": "reject", "digest": call.digest, "reason": "ticket 7", "message": told})
            assert decided.status_code == 200, decided.text
            assert decided.json()["decision"] == "rejected"
            answered = await _answer(handle)
            state: dict[str, Any] = await handle.query("state")
            # an AG-UI resume
            thread = f"i40-gaps-agui-{uuid.uuid4().hex[:8]}"
            first = await _sse(http, "/agents/hitl-desk", {
                "threadId": thread, "runId": "r1", "messages": [
                    {"id": "m1", "role": "user", "content": prompt}]})
            (interrupt,) = first[-1]["outcome"]["interrupts"]
            assert "message" in interrupt["responseSchema"]["properties"]
            resumed = await _sse(http, "/agents/hitl-desk", {
                "threadId": thread, "runId": "r2", "messages": [],
                "resume": [{"interruptId": interrupt["id"], "status": "resolved",
                            "payload": {"decision": "reject", "reason": "ticket 8",
                                        "message": told}}]})
        assert resumed[-1]["type"] == "RUN_FINISHED", resumed
        assert resumed[-1]["result"] == f"delete=denied:{told}"
        agui: dict[str, Any] = await tclient.get_workflow_handle(thread).query("state")
    finally:
        await _stop(process)
    assert answered == f"delete=denied:{told}"
    for decisions, reason in ((state["decisions"], "ticket 7"), (agui["decisions"], "ticket 8")):
        (rejected,) = [d for d in decisions if d["decision"] == "rejected"]
        assert (rejected["reason"], rejected["message"]) == (reason, told)
