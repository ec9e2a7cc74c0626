"""Issue 40, porting item 7: what OpenAI's Agents SDK and Pydantic AI offer that towline had
no equivalent of, in real runs on the dev server (the CLI as a subprocess where it is a CLI).

- metadata on an approval request (Pydantic AI's `ApprovalRequired(metadata=)`): an `Ask`
  rule attaches it, and `towline pending --json` shows it with the waiting call;
- the exact text the model is told of a rejection (OpenAI's `rejection_message`): per
  `ToolApproval`, per tool (`Ask`), and per rejection (`towline reject --message`), the
  decision's winning, the reviewer's `reason` staying in the audit trail;
- `Handoff(on_handoff=...)` (an activity: once per handoff, never again on replay) and
  `Handoff(tool_name=...)`; `@tool(name=...)` for ordinary tools;
- `towline end RUN`: a session completes, and its result and `towline show` say it ended by
  request, not that it went idle (porting item 8's wrong wording).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from cli_helpers import TESTS_ON_PATH, towline, towline_process, until
from hitl_waits import waiting
from readme import cli_env, read_until, readme
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPart, tool
from towline.capabilities import Ask, Handoff, ToolApproval
from towline.client import events, start_run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import HandoffRecord, RunInput, RunResult
from towline.review import pending
from towline.runtime.plugin import TowlinePlugin
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]


# --- agents -----------------------------------------------------------------------------------

def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]


def _script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The latest user message is JSON: a list of [tool, args]; all called at once, then the
    answer lists every return as `tool=status:content`."""
    asked = max(i for i, m in enumerate(messages) if isinstance(m, ModelRequest)
                and any(isinstance(p, UserPart) for p in m.parts))
    latest = next(p for p in messages[asked].parts if isinstance(p, UserPart))
    text = str(latest.content)
    if not text.startswith("["):
        return f"echo: {text}"
    if any(isinstance(m, ModelResponse) for m in messages[asked:]):
        return "; ".join(f"{r.tool_name}={r.status}:{r.content}" for r in _returns(messages[asked:]))
    calls: list[Any] = [ToolCallPart(tool_name=c[0], args=c[1], tool_call_id=f"c{i}")
                        for i, c in enumerate(json.loads(text))]
    return ModelResponse(parts=calls)


@tool
def pay(amount: int, to: str) -> str:
    """Pay `amount` to `to`."""
    return f"paid {amount} to {to}"


@tool
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def wire(amount: int) -> str:
    """Wire money (no message of its own: the ToolApproval's)."""
    return f"wired {amount}"


def _pay_rule(args: dict[str, Any]) -> Any:
    """A large payment asks, telling the reviewer why (metadata read from the arguments)."""
    if args["amount"] <= 100:
        return "approve"
    return Ask(metadata={"risk": "high", "limit": 100, "over_by": args["amount"] - 100},
               rejection_message="Finance declined this payment: do not retry it.")


desk = Agent(
    name="i40-desk", model=FunctionModel(_script, model_name="i40-desk"),
    tools=[pay, delete, wire],
    capabilities=[ToolApproval(
        rules={"pay": _pay_rule, "delete": Ask(metadata={"ticket": "OPS-7"}), "wire": "ask"},
        rejection_message="A reviewer declined this call.", timeout=timedelta(hours=1))],
)

handoffs_recorded: list[dict[str, Any]] = []
"""What the `on_handoff` activity saw, one entry per execution (its own record)."""


@activity.defn(name="i40_record_handoff")
async def record_handoff(handoff: HandoffRecord) -> None:
    """The on_handoff activity: records each execution."""
    handoffs_recorded.append(handoff.model_dump())


offered: list[list[str]] = []
"""The tool names each triage request offered the model."""


def _triage(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    offered.append([t.name for t in info.tools])
    if not _returns(messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"order": "A1"},
                                                 tool_call_id="t1")])
    return ModelResponse(parts=[ToolCallPart(tool_name="escalate_to_billing", args={},
                                             tool_call_id="t2")])


@tool(name="lookup")
def find_order_in_the_database(order: str) -> str:
    """Look an order up."""
    return f"order {order}: paid twice"


billing = Agent(name="i40-billing", model=FunctionModel(
    lambda messages, info: "billing: " + str(_returns(messages)[-1].content), model_name="i40-billing"))

triage = Agent(
    name="i40-triage", model=FunctionModel(_triage, model_name="i40-triage"),
    tools=[find_order_in_the_database],
    capabilities=[Handoff(billing, tool_name="escalate_to_billing", on_handoff=record_handoff)],
)

AGENTS = [desk, triage, billing]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, AGENTS) as started:
        yield started


THREE_CALLS = json.dumps([["pay", {"amount": 250, "to": "bob"}], ["delete", {"path": "/tmp/x"}],
                          ["wire", {"amount": 5}]])
"""A prompt whose calls all ask: a large payment (metadata from its rule), a delete (the
`Ask`'s ticket) and a wire (a plain ask)."""


# --- approval metadata and the rejection text -----------------------------------------------

async def test_approval_metadata_is_shown_by_towline_pending(
        worker: tuple[Client, str], target: str, namespace: str) -> None:
    tc, queue = worker
    handle = await start_run(tc, desk, THREE_CALLS, task_queue=queue)
    await waiting(handle, 3)
    env = cli_env(target, namespace)
    done = await until(lambda: towline("pending", "--json", env=env),
                       lambda d: d.code == 0 and handle.id in d.out, "the run in towline pending")
    rows = {r["tool_name"]: r for r in json.loads(done.out) if r.get("workflow_id") == handle.id}
    assert rows["pay"]["metadata"] == {"risk": "high", "limit": 100, "over_by": 150}
    assert rows["delete"]["metadata"] == {"ticket": "OPS-7"}
    assert rows["wire"]["metadata"] is None  # a plain "ask" attaches nothing
    shown = await towline("show", handle.id, env=env)
    assert 'metadata {"risk": "high", "limit": 100, "over_by": 150}' in shown.out, shown.out
    state = await handle.query("state")  # the state query, and towline.review.pending
    assert {e["tool_name"]: e.get("metadata") for e in state["pending_approvals"].values()} == {
        "pay": {"risk": "high", "limit": 100, "over_by": 150}, "delete": {"ticket": "OPS-7"},
        "wire": None}
    calls = {c.tool_name: c for c in await pending(handle)}
    assert calls["delete"].metadata == {"ticket": "OPS-7"}
    from towline.serve.waits import interrupt  # towline serve's AG-UI interrupt for the call

    told = interrupt(calls["pay"]).metadata
    assert told is not None and told["towline"]["metadata"] == {"risk": "high", "limit": 100,
                                                                "over_by": 150}
    await handle.signal("cancel")
    asked = [e.to_json() async for e in events(handle) if e.type == "approval"]
    assert {e["tool"]: e.get("metadata") for e in asked} == {
        "pay": {"risk": "high", "limit": 100, "over_by": 150}, "delete": {"ticket": "OPS-7"},
        "wire": None}, asked


async def test_the_model_is_told_the_configured_rejection_message(
        worker: tuple[Client, str], target: str, namespace: str) -> None:
    tc, queue = worker
    handle = await start_run(tc, desk, THREE_CALLS, task_queue=queue)
    calls = {c.tool_name: c for c in await waiting(handle, 3)}
    env = cli_env(target, namespace)
    for tool_name, extra in (("pay", []), ("wire", []),
                             ("delete", ["--message", "Deleting is not allowed here; ask the user."])):
        done = await towline("reject", handle.id, calls[tool_name].call_id, "--reason",
                             f"audit: {tool_name} refused", "--by", "alice", *extra, env=env)
        assert done.code == 0, done
    result: RunResult = await handle.result()
    told = {r.tool_name: (r.status, r.content) for r in _returns(result.messages)}
    assert told == {
        "pay": ("denied", "Finance declined this payment: do not retry it."),  # the tool's Ask
        "wire": ("denied", "A reviewer declined this call."),  # the ToolApproval's
        "delete": ("denied", "Deleting is not allowed here; ask the user."),  # the decision's
    }
    trail = {e["tool"]: e for e in (await handle.query("state"))["decisions"]}
    assert trail["pay"]["reason"] == "audit: pay refused"  # the reason is the audit trail's
    assert trail["delete"]["message"] == "Deleting is not allowed here; ask the user."


async def test_a_message_on_anything_but_a_rejection_is_refused(
        worker: tuple[Client, str], target: str, namespace: str) -> None:
    tc, queue = worker
    handle = await start_run(tc, desk, json.dumps([["wire", {"amount": 5}]]), task_queue=queue)
    [call] = await waiting(handle, 1)
    from towline.workflows import Decision, Decisions

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("decide", Decisions(decisions=[Decision(
            kind="approve", call_id=call.call_id, digest=call.digest, message="hi")]))
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert "a message is what the model is told of a rejection" in cause.message
    assert len(await pending(handle)) == 1  # nothing changed
    await handle.signal("cancel")


# --- handoffs: on_handoff and the tool's name --------------------------------------------------

async def test_on_handoff_runs_once_per_handoff_and_not_on_replay(
        worker: tuple[Client, str]) -> None:
    tc, queue = worker
    handoffs_recorded.clear()
    offered.clear()
    handle = await start_run(tc, triage, "I was charged twice", task_queue=queue)
    result: RunResult = await handle.result()
    assert result.output == "billing: Transferred to i40-billing: it handles the conversation from here."
    # the names the model saw are the overridden ones, and they are what executed
    assert offered[0] == ["lookup", "escalate_to_billing"], offered
    returned = [(r.tool_name, r.status) for r in _returns(result.messages)]
    assert returned == [("lookup", "succeeded"), ("escalate_to_billing", "succeeded")]
    assert _returns(result.messages)[0].content == "order A1: paid twice"
    assert [(h.from_agent, h.to_agent, h.call_id) for h in result.handoffs] == [
        ("i40-triage", "i40-billing", "t2")]
    assert [(h["from_agent"], h["to_agent"]) for h in handoffs_recorded] == [
        ("i40-triage", "i40-billing")]
    [history] = await execution_histories(tc, handle.id)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled.count("i40_record_handoff") == 1
    assert "towline.tool.lookup" in scheduled
    # a replay of the whole history runs the workflow code again, never the activity
    await Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=AGENTS)]).replay_workflow(history)
    assert len(handoffs_recorded) == 1


# --- towline end -------------------------------------------------------------------------------

async def test_towline_end_ends_a_session_by_request(
        worker: tuple[Client, str], target: str, namespace: str) -> None:
    tc, queue = worker
    handle = await start_run(tc, desk, "hello", task_queue=queue, session=True, id="chat-1")
    for _ in range(400):
        state = await handle.query("state")
        if state["waiting_for"] == "message":
            break
        await asyncio.sleep(0.05)
    env = cli_env(target, namespace)
    done = await readme("towline end chat-1", env=env)  # as docs/sessions.md shows it
    assert done.code == 0, done
    assert "end requested" in done.out
    result: RunResult = await handle.result()
    assert (result.output, result.session_end) == ("echo: hello", "request")
    shown = await towline("show", handle.id, env=env)
    assert "Ended     by request" in shown.out and "idle" not in shown.out, shown.out
    as_json = await towline("show", handle.id, "--json", env=env)
    assert json.loads(as_json.out)["session_end"] == "request"
    again = await towline("end", handle.id, env=env)
    assert again.code == 1 and "has ended" in again.err, again


async def test_an_idle_session_says_it_went_idle(worker: tuple[Client, str]) -> None:
    tc, queue = worker
    handle = await tc.start_workflow(
        "AgentRun", RunInput(agent=desk.name, prompt="hi", session=True,
                             session_timeout=timedelta(milliseconds=300)),
        id=f"i40-idle-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
    result = await handle.result()
    assert (result.output, result.session_end) == ("echo: hi", "idle")


async def test_towline_run_session_says_how_it_ended(
        worker: tuple[Client, str], target: str, namespace: str) -> None:
    _, queue = worker
    workflow_id = f"i40-session-{uuid.uuid4().hex[:8]}"
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH})
    proc = await towline_process("run", "test_i40_equivalents:desk", "hello", "--session",
                                 "--no-worker", "--task-queue", queue, "--id", workflow_id,
                                 env=env)
    await read_until(proc.stderr, f"towline end {workflow_id}")  # the session waits
    done = await towline("end", workflow_id, env=env)
    assert done.code == 0, done
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    assert out.decode() == "echo: hello\n"
    said = err.decode()
    assert f"Session {workflow_id} ended: by request" in said, said
    assert "idle timeout" not in said


async def test_towline_end_has_help_and_exit_codes(target: str, namespace: str) -> None:
    env = cli_env(target, namespace)
    helped = await towline("end", "--help", env=env)
    assert helped.code == 0 and "the `end` signal" in helped.out, helped
    missing = await towline("end", env=env)
    assert missing.code == 2, missing
    gone = await towline("end", f"no-such-run-{uuid.uuid4().hex[:6]}", env=env)
    assert gone.code == 1 and gone.err.startswith("towline: error: "), gone
