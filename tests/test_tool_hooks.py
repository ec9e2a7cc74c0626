"""Tool hooks in real runs: failures, confirmed effects, and the `ToolContext` they see.

A raising `before_tool_execute` records `not_executed` and the run goes on; a
raising `after_tool_execute` fails the run but keeps the tool's confirmed result
and usage, with no further model request and no second execution; `ToolContext`
carries the real run id, run step, tool call id and retry count.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, statuses
from towline import (
    Agent,
    Capability,
    ModelRetry,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolReturn,
    Usage,
    tool,
)
from towline.client import run, start_run
from towline.errors import RunError, ToolDenied
from towline.testing import towline_worker

EXECUTED: list[ToolContext] = []
"""The context of every tool execution (tools run in this process)."""
HOOK_SEEN: list[tuple[str, ToolContext, str]] = []
"""(hook, context, result status or "") of every tool-hook call (hooks run in this process)."""

TOOL_USAGE = Usage(requests=1, input_tokens=100, output_tokens=50)


@tool
def work(ctx: ToolContext, retry: bool = False) -> ToolResult:
    """Does some work (reporting usage), or asks for a retry."""
    EXECUTED.append(ctx)
    if retry:
        raise ModelRetry("again")
    return ToolResult(content="worked", usage=TOOL_USAGE)


def _executed(run_id: str) -> list[ToolContext]:
    return [c for c in EXECUTED if c.run_id == run_id]


class RaiseBefore(Capability):
    """`before_tool_execute` raises for call `b1` only."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        if call.tool_call_id == "b1":
            raise RuntimeError("hook bug")
        return call


class Deny(Capability):
    """`before_tool_execute` denies every call."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        raise ToolDenied("not allowed today")


class RaiseAfter(Capability):
    """`after_tool_execute` raises."""

    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> None:
        raise RuntimeError("audit log unavailable")


class Record(Capability):
    """Records the context both tool hooks see."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        HOOK_SEEN.append(("before", ctx, ""))
        return call

    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> None:
        HOOK_SEEN.append(("after", ctx, result.status))


BEFORE = Script([calls(call("work", {}, "b1"), call("work", {}, "b2")), "done"])
DENY = Script([calls(call("work", {}, "d1")), "done"])
AFTER = Script([calls(call("work", {}, "a1")), "never asked"])
CONTEXT = Script([
    calls(call("work", {"retry": True}, "k1")), calls(call("work", {}, "k2")), "done",
])

BEFORE_AGENT = Agent(name="hooks-raise-before", model=BEFORE.model, tools=[work],
                     capabilities=[RaiseBefore])
DENY_AGENT = Agent(name="hooks-deny", model=DENY.model, tools=[work], capabilities=[Deny])
AFTER_AGENT = Agent(name="hooks-raise-after", model=AFTER.model, tools=[work],
                    capabilities=[RaiseAfter])
CONTEXT_AGENT = Agent(name="hooks-context", model=CONTEXT.model, tools=[work],
                      capabilities=[Record])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    async with towline_worker(client, [BEFORE_AGENT, DENY_AGENT, AFTER_AGENT,
                                       CONTEXT_AGENT]) as pair:
        yield pair


async def test_raising_before_hook_skips_that_call_and_the_run_goes_on(
    worker: tuple[Client, str],
) -> None:
    tclient, queue = worker
    result = await run(tclient, BEFORE_AGENT, "go", task_queue=queue)
    assert [c.tool_call_id for c in _executed(result.run_id)] == ["b2"]
    assert statuses(result.messages) == {"b1": "not_executed", "b2": "succeeded"}
    assert [s.run_step for s in BEFORE.seen] == [1, 2]
    assert result.output == "done"
    assert_paired(result)


async def test_denying_before_hook_tells_the_model(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, DENY_AGENT, "go", task_queue=queue)
    assert _executed(result.run_id) == []
    (ret,) = returns(result.messages)
    assert (ret.status, ret.content) == ("denied", "not allowed today")
    assert result.output == "done"


async def test_raising_after_hook_keeps_the_confirmed_result(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, AFTER_AGENT, "go", task_queue=queue)
    err = info.value
    assert err.reason == "CapabilityViolation"
    assert "RaiseAfter.after_tool_execute" in err.message
    partial = err.partial
    assert partial is not None
    assert len(_executed(partial.run_id)) == 1
    (ret,) = returns(partial.messages)
    assert (ret.tool_call_id, ret.status, ret.content) == ("a1", "succeeded", "worked")
    model_usage = AFTER.model.usage
    assert partial.usage.input_tokens == model_usage.input_tokens + TOOL_USAGE.input_tokens
    assert partial.counters.output_tokens == model_usage.output_tokens + TOOL_USAGE.output_tokens
    assert partial.counters.tool_calls == 1
    assert [s.run_step for s in AFTER.seen] == [1]
    assert partial.request_count == 1
    assert_paired(partial)


async def test_tool_context_carries_the_real_identity(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    run_id = f"hooks-context-{uuid.uuid4().hex[:8]}"
    handle = await start_run(tclient, CONTEXT_AGENT, "go", task_queue=queue, id=run_id)
    result = await handle.result()
    assert result.run_id == run_id

    expected = [(run_id, CONTEXT_AGENT.name, 1, "k1", 0), (run_id, CONTEXT_AGENT.name, 2, "k2", 1)]

    def key(c: ToolContext) -> tuple[str, str, int, str, int]:
        return (c.run_id, c.agent, c.run_step, c.tool_call_id, c.retry)

    executed = _executed(run_id)
    assert [key(c) for c in executed] == expected
    assert [c.idempotency_key for c in executed] == [f"{run_id}/1/k1", f"{run_id}/2/k2"]
    seen = [(hook, key(c), status) for hook, c, status in HOOK_SEEN if c.run_id == run_id]
    assert seen == [
        ("before", expected[0], ""), ("after", expected[0], "retry"),
        ("before", expected[1], ""), ("after", expected[1], "succeeded"),
    ]
    assert result.output == "done"
