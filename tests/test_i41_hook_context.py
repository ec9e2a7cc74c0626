"""The public hook context (issue 41): a capability written outside towline does what the
built-ins do, and the built-ins themselves use nothing but the public API.

- `capabilities/` imports only towline's public modules (checked with `ast`, imports inside
  functions and under `TYPE_CHECKING` included) and has no engine-version branch left.
- A third-party capability defined here, on `towline.hook_context()` alone, calls a model
  durably, reports its usage, publishes a live event and asks a person for a decision, in a
  real run on the dev server: the ledger counts the usage, the event is in the run's stream,
  the wait shows in the `state` query.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from towline import (
    Agent,
    Capability,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolCallPart,
    ToolContext,
    ToolDenied,
    ToolReturnPart,
    Usage,
    UserPart,
    hook_context,
    tool,
)
from towline.client import events, start_run
from towline.events import EventType
from towline.hooks import ApprovalDecision, HookContext
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult
from towline.runtime.ledger import counters_from_history
from towline.testing import towline_worker

CAPABILITIES = Path(__file__).resolve().parent.parent / "capabilities"

PUBLIC_MODULES = frozenset({
    "towline", "towline.agent", "towline.errors", "towline.events", "towline.hooks",
    "towline.messages", "towline.models", "towline.native_tools", "towline.options",
    "towline.results", "towline.tools",
})
"""towline's public modules: what a capability written outside towline may import (besides
`towline.capabilities` itself). Everything else (`towline.workflows`, `towline.runtime`,
`towline.activities`, `towline.fleet`, ...) is the engine."""

VERSION_BRANCHES = frozenset({"at_least", "since"})
"""The engine-version checks (`towline.workflows.versions`) a capability no longer branches on."""


def imported_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, a module of `package`:
    at the top, inside functions and classes, under `if TYPE_CHECKING:`, relative ones
    resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                yield node.lineno, f"{base}.{node.module}" if node.module else base
            else:
                yield node.lineno, node.module or ""


def engine_imports(source: str, package: str = "towline.capabilities") -> list[str]:
    """The imports of towline modules that are neither public nor the capabilities' own."""
    wrong: list[str] = []
    for line, name in imported_modules(source, package):
        if name != "towline" and not name.startswith("towline."):
            continue  # the standard library, pydantic, temporalio: not towline's engine
        if name in PUBLIC_MODULES or name == package or name.startswith(package + "."):
            continue
        wrong.append(f"line {line}: {name}")
    return wrong


def version_branches(source: str) -> list[str]:
    """Calls of `at_least(...)` / `since(...)` (however imported)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in VERSION_BRANCHES:
                found.append(f"line {node.lineno}: {name}()")
    return found


def test_the_import_check_sees_every_kind_of_import() -> None:
    """The check itself: a deferred import, a type-only one and a relative one that leaves the
    package are all engine imports; public modules and siblings are not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from towline.messages import Message\n"
        "from .base import Capability\n"
        "from ..workflows import call_model\n"
        "if TYPE_CHECKING:\n"
        "    from towline.runtime.model_types import Model\n"
        "async def hook():\n"
        "    from towline.workflows import current_run\n"
        "    import towline.fleet.routing\n"
    )
    assert engine_imports(source) == ["line 4: towline.workflows", "line 6: towline.runtime.model_types",
                                      "line 8: towline.workflows", "line 9: towline.fleet.routing"]
    assert version_branches("if at_least(5):\n    pass\nversions.since('x')\n") == [
        "line 1: at_least()", "line 3: since()"]


def test_capabilities_use_only_the_public_api() -> None:
    modules = sorted(CAPABILITIES.glob("*.py"))
    assert len(modules) > 15, modules
    wrong = {p.name: found for p in modules
             if (found := engine_imports(p.read_text(encoding="utf-8")))}
    assert wrong == {}, "capabilities/ imports engine internals (use towline.hook_context())"


def test_capabilities_have_no_engine_version_branch() -> None:
    wrong = {p.name: found for p in sorted(CAPABILITIES.glob("*.py"))
             if (found := version_branches(p.read_text(encoding="utf-8")))}
    assert wrong == {}


def test_the_hook_context_is_only_for_hook_code() -> None:
    with pytest.raises(TypeError, match="not running inside an AgentRun"):
        hook_context()


# --- a capability written outside towline --------------------------------------------------

REVIEWER = "i41-reviewer"
REVIEW = "FAIL: a transfer to an account never used before"
REVIEW_USAGE = Usage(requests=1, input_tokens=11, output_tokens=4)
MODEL_USAGE = Usage(requests=1, input_tokens=10, output_tokens=5)

transfers: list[int] = []


@tool
def transfer(amount: int) -> str:
    """Move money."""
    transfers.append(amount)
    return f"moved {amount}"


@dataclass(frozen=True)
class SecondOpinion(Capability):
    """Before a transfer runs, a reviewer model reads it and a person decides, shown its
    review: built on `towline.hook_context()` alone."""

    reviewer: str

    async def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        hook = hook_context()
        asked = ModelRequest(parts=[UserPart(content=f"Review {call.tool_name}({call.args})")])
        response = await hook.call_model(self.reviewer, [asked],
                                         summary=f"second opinion on {call.tool_call_id}")
        hook.report_usage(response.usage)
        hook.emit(EventType.GUARDRAIL, guardrail="second-opinion", guards="tool_call",
                  action="reviewed", said=response.text, call_id=call.tool_call_id)
        view = hook.run
        decision = await hook.request_approval(
            ctx, call, None, metadata={"review": response.text, "agent": view.agent.name,
                                       "step": view.counters.run_step})
        if decision is None or not hook.is_approved(call.tool_call_id):
            raise ToolDenied(f"not approved: {decision.reason if decision else 'no decision'}")
        return call


def payer(name: str) -> FunctionModel:
    """Step 1 makes two transfers (two tool calls, gated in parallel tasks); step 2 answers
    with what the tools returned."""

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[
                ToolCallPart(tool_name="transfer", args={"amount": 5}, tool_call_id="t1"),
                ToolCallPart(tool_name="transfer", args={"amount": 7}, tool_call_id="t2")])
        return "; ".join(f"{p.tool_call_id}={p.status}:{p.content}" for p in returns)

    return FunctionModel(answer, model_name=name, usage=MODEL_USAGE)


async def eventually(probe: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll `probe` until it returns something truthy (bounded: no timing assertions)."""
    for _ in range(400):
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"never observed: {what}")


async def both_pending(handle: WorkflowHandle[Any, RunResult]) -> dict[str, Any]:
    state: dict[str, Any] = await handle.query("state")
    waiting: dict[str, Any] = state.get("pending_approvals") or {}
    return state if set(waiting) == {"t1", "t2"} else {}


def test_the_public_context_is_the_engines_own() -> None:
    import towline
    from towline.workflows.hook_api import HookContext as Implementation

    assert towline.HookContext is HookContext is Implementation
    assert "HookContext" in towline.__all__ and "hook_context" in towline.__all__


async def test_a_third_party_capability_calls_a_model_asks_a_person_and_emits(
        client: Client) -> None:
    agent = Agent(name="i41-second-opinion", model=payer("i41-payer"), tools=[transfer],
                  capabilities=[SecondOpinion(reviewer=REVIEWER)])
    reviewer = FunctionModel(lambda messages, info: REVIEW, model_name=REVIEWER,
                             usage=REVIEW_USAGE)
    transfers.clear()
    async with towline_worker(client, [agent], models={REVIEWER: reviewer}) as (tc, queue):
        handle = await start_run(tc, agent, "pay 5 and 7", task_queue=queue)
        # both calls wait for a person: the hook context was found in each gathered tool task
        state = await eventually(lambda: both_pending(handle), "two pending approvals")
        assert state["status"] == "waiting"
        for call_id in ("t1", "t2"):
            entry = state["pending_approvals"][call_id]
            assert entry["kind"] == "approval" and entry["decisions"] == ["approve", "reject"]
            assert entry["metadata"] == {"review": REVIEW, "agent": agent.name, "step": 1}
        assert transfers == []
        await handle.execute_update("approve", ApprovalDecision(call_id="t1"))
        await handle.execute_update("reject", ApprovalDecision(call_id="t2", reason="too much"))
        result = await handle.result()
        history = list((await handle.fetch_history()).events)
        stream = [e async for e in events(handle)]

    assert transfers == [5]
    assert result.output == "t1=succeeded:moved 5; t2=denied:not approved: too much"
    # the reviewer's two requests are durable activities of their own, named for the run
    scheduled = [e.activity_task_scheduled_event_attributes for e in history
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert [a.activity_type.name for a in scheduled].count("towline.model_request") == 4
    # the ledger counts the reported usage: two own requests and the reviewer's two
    expected_in = 2 * MODEL_USAGE.input_tokens + 2 * REVIEW_USAGE.input_tokens
    expected_out = 2 * MODEL_USAGE.output_tokens + 2 * REVIEW_USAGE.output_tokens
    assert (result.counters.input_tokens, result.counters.output_tokens) == (expected_in,
                                                                            expected_out)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (expected_in, expected_out)
    # as the history records it: the reviews' tokens in, its requests the run's own two
    recorded = counters_from_history(history)[-1]
    assert (recorded.input_tokens, recorded.output_tokens, recorded.requests) == (
        expected_in, expected_out, 2)
    # the hook's event is in the run's stream, at its step, beside the approvals it asked for
    reviewed = [e for e in stream if e.type == EventType.GUARDRAIL]
    assert sorted(e.field("call_id") for e in reviewed) == ["t1", "t2"]
    for e in reviewed:
        assert (e.field("guardrail"), e.field("action"), e.field("said"), e.step) == (
            "second-opinion", "reviewed", REVIEW, 1)
    assert sorted(e.field("call_id") for e in stream
                  if e.type == EventType.APPROVAL) == ["t1", "t2"]
