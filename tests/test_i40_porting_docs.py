"""Issue 40: what the docs tell a team porting from another SDK stays what towline does.

- "Porting your tools" (docs/agents-and-tools.md) says how long a plain exception in an
  idempotent tool takes to reach the model: the attempts and the waits between them. A real
  run on the session's dev server, of an idempotent tool with `Tool`'s default retry policy
  raising on every attempt, records in its history the retry policy the tool's activity was
  scheduled with and how many attempts ran; the waits that policy gives (and the policy
  `Tool` computes from its defaults) are the ones the page states, and the model's next
  request carries the failure the page quotes. The page also says a plain exception in a tool
  that is not idempotent ends the run `UncertainToolEffect`: a real run checks that too.
- The pages a porting team reads each end with a "Coming from another SDK" table naming the
  other SDKs' names it maps (OpenAI Agents SDK, Pydantic AI).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

import pytest
from readme import REPO
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RetryPolicy

from towline import Agent, RunError, tool
from towline.client import run
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

DOCS = REPO / "docs"

FIGURE = re.compile(r"by default (\d+) attempts, waiting ([\d +]+?) = (\d+) s between them")
"""The sentence of "Porting your tools" that states the default retries and their waits."""

TABLES: dict[str, tuple[str, ...]] = {
    "human-in-the-loop.md": (
        "needs_approval", "interruptions", "RunState", "state.approve", "state.reject",
        "rejection_message", "tool_error_formatter", "requires_approval", "ApprovalRequired",
        "DeferredToolRequests", "DeferredToolResults", "ToolDenied", "ToolApproved",
        "override_args", "tool_call_approved",
    ),
    "client-tools.md": (
        "CallDeferred", "ExternalToolset", "DeferredToolRequests", "DeferredToolResults",
        "ModelRetry", "ToolFailed",
    ),
    "agents-and-tools.md": (
        "function_tool", "name_override", "RunContextWrapper", "failure_error_function",
        "tool_error_formatter", "@agent.tool", "tool_plain", "deps_type",
        "@agent.instructions", "ModelRetry",
    ),
}
"""Each page's "Coming from another SDK" table, and the other SDKs' names it must map."""


def _section(page: str, title: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert found, f"docs/{page} has no '## {title}' section"
    return found.group(1)


def _waits(policy: RetryPolicy) -> list[float]:
    """The seconds Temporal waits before each retry under `policy` (its defaults filled in as
    the server fills them: a maximum interval of 100 initial intervals)."""
    initial = policy.initial_interval.total_seconds()
    cap = (policy.maximum_interval or policy.initial_interval * 100).total_seconds()
    return [min(initial * policy.backoff_coefficient ** i, cap)
            for i in range(policy.maximum_attempts - 1)]


@tool(idempotent=True)
def always_down(city: str) -> str:
    """The weather in a city (its service is down)."""
    raise RuntimeError(f"weather service down for {city}")


@tool
def charge_card(amount: int) -> str:
    """Charge the card (not idempotent)."""
    raise RuntimeError("gateway reset the connection")


def _one_call_then_answer(tool_name: str) -> Callable[[list[Message], ModelInfo], ModelResponse | str]:
    """A model that calls `tool_name` once, then answers with the return it was shown."""

    def model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
                   if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(tool_name=tool_name, args={
                "city": "Oslo"} if tool_name == "always_down" else {"amount": 5},
                tool_call_id="call_1")])
        return f"{returns[0].status}: {returns[0].content}"

    return model


async def test_the_documented_retry_wait_is_the_default_policy_of_an_idempotent_tool(
    client: Client,
) -> None:
    figure = FIGURE.search(_section("agents-and-tools.md", "Porting your tools"))
    assert figure, "Porting your tools states no default retry figure"
    attempts, waits, total = int(figure[1]), [float(w) for w in figure[2].split("+")], int(figure[3])

    agent = Agent(name="i40-porting-retries",
                  model=FunctionModel(_one_call_then_answer("always_down"), model_name="porting"),
                  tools=[always_down])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "weather in Oslo?", task_queue=queue)
        history = await tc.get_workflow_handle(result.run_id).fetch_history()

    scheduled = [e.activity_task_scheduled_event_attributes for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name
                 == "towline.tool.always_down"]
    assert len(scheduled) == 1
    recorded = RetryPolicy.from_proto(scheduled[0].retry_policy)
    ran = [e.activity_task_started_event_attributes.attempt for e in history.events
           if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    # the model request before, the tool's last attempt (the one recorded), the model after
    assert ran == [1, recorded.maximum_attempts, 1]
    assert recorded.maximum_attempts == attempts
    assert _waits(recorded) == waits == _waits(always_down.effective_retry_policy())
    assert sum(waits) == total
    # the model was told, in the words the page quotes
    assert result.output == "failed: failed after retries: RuntimeError: weather service down for Oslo"


async def test_a_plain_exception_in_a_tool_that_is_not_idempotent_ends_the_run(
    client: Client,
) -> None:
    assert "it ends the run `UncertainToolEffect`" in " ".join(
        _section("agents-and-tools.md", "Porting your tools").split())
    agent = Agent(name="i40-porting-uncertain",
                  model=FunctionModel(_one_call_then_answer("charge_card"), model_name="porting"),
                  tools=[charge_card])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as failed:
            await run(tc, agent, "charge 5", task_queue=queue)
    assert failed.value.reason == "UncertainToolEffect"
    assert "gateway reset the connection" in failed.value.message
    assert failed.value.partial is not None


@pytest.mark.parametrize("page", sorted(TABLES))
def test_each_page_maps_the_other_sdks_names(page: str) -> None:
    table = _section(page, "Coming from another SDK")
    assert "| you had | in towline |" in table
    missing = [name for name in TABLES[page] if name not in table]
    assert not missing, f"docs/{page}'s table does not map {missing}"


def test_the_limits_the_checklist_states_are_tools_defaults() -> None:
    checklist = " ".join(_section("agents-and-tools.md", "Porting your tools").split())
    minutes = always_down.start_to_close_timeout // timedelta(minutes=1)
    heartbeat = Agent(name="defaults", model="test").tool_heartbeat_timeout.total_seconds()
    assert f"{minutes} minutes per attempt" in checklist
    assert f"within its heartbeat timeout ({heartbeat:g} s)" in checklist
    assert f"count against the tool's `max_retries` ({always_down.max_retries}," in checklist
