"""Handoffs in real runs on the dev server: the same run goes on as another agent.

A triage agent hands the run to a billing agent (its instructions, model, tools), which may
hand it back by name. The models are `FunctionModel`s that record what each request offered
and sent, so the tests read what each agent was given; the counters, the handoff path and
the authority are read from what the run recorded. One worker serves the module.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from cli_helpers import patch_ids
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.worker import Replayer

from scripts import returns
from towline import Agent, Limits, ModelResponse, ToolCallPart, tool
from towline.capabilities import Handoff, remove_tool_calls
from towline.client import events, run, start_run
from towline.errors import ConfigurationError
from towline.messages import Message, ModelRequest, SystemPart
from towline.models import FunctionModel, ModelInfo
from towline.results import HandoffRecord, RunInput, RunResult
from towline.runtime.plugin import TowlinePlugin
from towline.runtime.search_attributes import AGENT
from towline.testing import execution_histories, towline_worker
from towline.timetravel.travel import fork, plan_fork
from towline.workflows import AgentRun
from towline.workflows.versions import version_patch

pytestmark = pytest.mark.timeout(60)

seen: dict[str, list[tuple[list[str], list[Message]]]] = {}
"""Per model: the tools each request offered and the messages it sent."""


def _note(model: str, messages: list[Message], info: ModelInfo) -> int:
    seen.setdefault(model, []).append(([t.name for t in info.tools], list(messages)))
    return len(returns(messages))


def _call(name: str, call_id: str, **args: Any) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool_name=name, args=args, tool_call_id=call_id)])


@tool
def lookup_order(order: str) -> str:
    """Look an order up (triage's tool)."""
    return f"order {order}: paid twice"


@tool
def refund(order: str) -> str:
    """Refund an order (billing's tool)."""
    return f"refunded {order}"


def triage_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    done = _note("hx-triage-model", messages, info)
    if done == 0:
        return _call("lookup_order", "t1", order="A1")
    if done == 1:
        return _call("transfer_to_hx_billing", "t2")
    return "triage again: " + str(returns(messages)[-1].content)


def billing_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    done = _note("hx-billing-model", messages, info)
    calls_so_far = [r.tool_name for r in returns(messages)]
    if calls_so_far[-1].startswith("transfer_to_"):
        # after the handoff: try triage's tool (no longer authorised), and refund
        return ModelResponse(parts=[
            ToolCallPart(tool_name="lookup_order", args={"order": "A1"}, tool_call_id=f"b{done}a"),
            ToolCallPart(tool_name="refund", args={"order": "A1"}, tool_call_id=f"b{done}b")])
    return " | ".join(f"{r.tool_name}:{r.status}" for r in returns(messages))


billing = Agent(name="hx-billing", model=FunctionModel(billing_script, model_name="hx-billing-model"),
                instructions="You handle billing.", tools=[refund])
triage = Agent(name="hx-triage", model=FunctionModel(triage_script, model_name="hx-triage-model"),
               instructions="You triage.", tools=[lookup_order],
               capabilities=[Handoff(billing)], limits=Limits(max_steps=6))


def filtered_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    _note("hx-filter-model", messages, info)
    if info.agent == "hx-filter-triage":
        return _call("transfer_to_hx_filter_billing", "f1")
    return "billing read: " + " / ".join(m.kind for m in messages)


filter_billing = Agent(name="hx-filter-billing",
                       model=FunctionModel(filtered_script, model_name="hx-filter-model"))
filter_triage = Agent(name="hx-filter-triage",
                      model=FunctionModel(filtered_script, model_name="hx-filter-model"),
                      capabilities=[Handoff(filter_billing, input_filter=remove_tool_calls)])


def ping_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Hand over to the other agent until four handoffs were made, then answer."""
    done = len(returns(messages))
    if done < 4:
        other = "hx-pong" if info.agent == "hx-ping" else "hx-ping"
        return _call(f"transfer_to_{other.replace('-', '_')}", f"p{done}")
    return f"{info.agent} answers after {done} handoffs"


ping = Agent(name="hx-ping", model=FunctionModel(ping_script, model_name="hx-ping-model"),
             capabilities=[Handoff("hx-pong")])
pong = Agent(name="hx-pong", model=FunctionModel(ping_script, model_name="hx-pong-model"),
             capabilities=[Handoff(ping)])


def double_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not returns(messages):
        return ModelResponse(parts=[
            ToolCallPart(tool_name="transfer_to_hx_quiet", args={}, tool_call_id="d1"),
            ToolCallPart(tool_name="transfer_to_hx_billing", args={}, tool_call_id="d2")])
    return f"{info.agent}: " + " | ".join(f"{r.status}:{r.content}" for r in returns(messages))


quiet = Agent(name="hx-quiet", model=FunctionModel(double_script, model_name="hx-quiet-model"))
double = Agent(name="hx-double", model=FunctionModel(double_script, model_name="hx-double-model"),
               capabilities=[Handoff(quiet), Handoff(billing)])

AGENTS = [triage, filter_triage, pong, double]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for the module's agents (the handoff targets registered with them)."""
    async with towline_worker(client, AGENTS) as served:
        yield served


async def test_the_run_goes_on_as_the_target_agent_under_its_authority(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    seen.clear()
    handle = await start_run(tc, triage, "I was charged twice for A1", task_queue=queue)
    result = await handle.result()
    assert result.output == ("lookup_order:succeeded | transfer_to_hx_billing:succeeded | "
                             "lookup_order:denied | refund:succeeded")
    assert result.handoffs == [HandoffRecord(step=2, from_agent="hx-triage", to_agent="hx-billing",
                                             call_id="t2")]
    # billing was asked with its own instructions and tools, and the whole conversation
    (tools, sent), _ = seen["hx-billing-model"]
    assert tools == ["refund"]
    first = sent[0]
    assert isinstance(first, ModelRequest) and first.parts == [SystemPart(content="You handle billing.")]
    assert [r.tool_call_id for r in returns(sent)] == ["t1", "t2"]
    assert [t for t, _ in seen["hx-triage-model"]] == [["lookup_order", "transfer_to_hx_billing"]] * 2
    # the previous agent's tool is no longer authorised
    denied = next(r for r in returns(result.messages) if r.status == "denied")
    assert (denied.tool_name, denied.content) == ("lookup_order", "unknown tool 'lookup_order'")
    # one ledger: the counters went on, under the run's max_steps
    c = result.counters
    assert (c.run_step, c.requests, c.tool_calls, c.max_steps) == (4, 4, 3, 6)  # denied: not started
    # the history names the agent that made each request, and records billing's version
    events = [e async for e in handle.fetch_history_events()]
    versions = TowlinePlugin(agents=AGENTS).registry.versions
    assert patch_ids(events) == [version_patch(versions["hx-triage"]),
                                 version_patch(versions["hx-billing"])]
    agents = [_agent_of(e) for e in events if _is_model_request(e)]
    assert agents == ["hx-triage", "hx-triage", "hx-billing", "hx-billing"]
    desc = await handle.describe()  # started as triage: its TowlineAgent stays triage's
    assert desc.typed_search_attributes.get(AGENT) == "hx-triage"


async def test_the_run_shows_the_active_agent_and_the_path(served: tuple[Client, str]) -> None:
    tc, queue = served
    handle = await start_run(tc, ping, "go", task_queue=queue)
    result = await handle.result()
    assert result.output == "hx-ping answers after 4 handoffs"
    assert [(h.from_agent, h.to_agent) for h in result.handoffs] == [
        ("hx-ping", "hx-pong"), ("hx-pong", "hx-ping"), ("hx-ping", "hx-pong"), ("hx-pong", "hx-ping")]
    state: dict[str, Any] = await handle.query("state")
    assert state["agent"] == "hx-ping" and len(state["handoffs"]) == 4
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert metadata.current_details.splitlines()[0] == "**hx-ping** — succeeded"
    assert "- handoffs: hx-ping → hx-pong → hx-ping → hx-pong → hx-ping (last at step 4)" \
        in metadata.current_details
    handed = [e.to_json() async for e in events(handle) if e.type == "handoff"]
    assert [e["to_agent"] for e in handed] == ["hx-pong", "hx-ping", "hx-pong", "hx-ping"]
    assert handed[-1]["path"] == ["hx-ping", "hx-pong", "hx-ping", "hx-pong", "hx-ping"]


async def test_an_input_filter_rewrites_the_conversation_the_target_goes_on_with(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    result = await run(tc, filter_triage, "hello", task_queue=queue)
    assert result.output == "billing read: request"  # the prompt alone, no tool parts
    assert [m.kind for m in result.messages] == ["request", "response"]


async def test_one_handoff_per_response(served: tuple[Client, str]) -> None:
    tc, queue = served
    result = await run(tc, double, "both", task_queue=queue)
    assert str(result.output).startswith("hx-quiet: succeeded:Transferred to hx-quiet")
    first, second = returns(result.messages)
    assert (first.status, second.status) == ("succeeded", "failed")
    assert "already handed the run to 'hx-quiet'" in str(second.content)
    assert [h.to_agent for h in result.handoffs] == ["hx-quiet"]


async def test_a_continue_as_new_after_a_handoff_goes_on_as_the_target(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    handle = await tc.start_workflow(
        "AgentRun", RunInput(agent="hx-ping", prompt="go", continue_as_new_after_events=14),
        id=f"hx-can-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
    result = await handle.result()
    assert result.output == "hx-ping answers after 4 handoffs"
    assert len(result.handoffs) == 4  # carried across the executions
    assert handle.first_execution_run_id is not None
    chain = await execution_histories(tc, handle.id, handle.first_execution_run_id)
    assert len(chain) >= 3  # it continued as new between handoffs...
    asked = [[_agent_of(e) for e in h.events if _is_model_request(e)] for h in chain]
    # ...and each execution went on as the agent the run had been handed to
    assert [a for execution in asked for a in execution] == [
        "hx-ping", "hx-pong", "hx-ping", "hx-pong", "hx-ping"]
    assert all(execution for execution in asked)
    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=AGENTS)])
    for history in chain:  # every execution replays with today's code
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None


def _is_model_request(e: Any) -> bool:
    return (e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name
            == "towline.model_request")


def _agent_of(e: Any) -> str:
    return json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)["agent"]


async def test_a_fork_after_a_handoff_starts_as_the_agent_of_that_step(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    seen.clear()
    handle = await start_run(tc, triage, "charged twice", task_queue=queue)
    await handle.result()
    plan = await plan_fork(tc, handle.id, at_step=3)
    assert plan.input.agent == "hx-billing"
    forked = await fork(tc, handle.id, at_step=3)
    result: RunResult = await forked.result()
    assert result.output.endswith("lookup_order:denied | refund:succeeded")
    assert result.handoffs == []  # it started as billing


def test_handoff_targets_must_be_registered() -> None:
    lonely = Agent(name="hx-lonely", capabilities=[Handoff("hx-nobody")])
    with pytest.raises(ConfigurationError, match="hands off to agent 'hx-nobody'"):
        TowlinePlugin(agents=[lonely])
    with pytest.raises(ConfigurationError, match="Agent or a name"):
        Handoff(42)  # type: ignore[arg-type]
