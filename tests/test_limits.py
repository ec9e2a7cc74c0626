"""Limits and tool-call admission, checked before the I/O they guard (real runs).

`request_limit` and `total_tokens_limit` fail the run with `UsageLimitExceeded`;
`tool_calls_limit` stops a whole batch; duplicate call ids execute nothing; a
truncated response executes nothing; missing call ids are generated, unique and
deterministic (the same on replay); a non-idempotent tool whose effect is
uncertain fails the run with `UncertainToolEffect`, while an idempotent one is
retried by Temporal. Every ended run pairs each call with exactly one return,
and every failure carries the partial run with its request count.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Replayer

from scripts import Script, assert_paired, call, calls, returns
from towline import Agent, Capability, Limits, ModelRequestState, ToolContext, TowlinePlugin, tool
from towline.client import run, start_run
from towline.errors import RunError
from towline.testing import towline_worker

EXECUTED: list[tuple[str, str, int]] = []
"""(run id, tool call id, activity attempt) of every tool execution (in this process)."""
IDS_SEEN: list[str] = []
"""Tool call ids as the hooks of `IDS_AGENT` saw them (hooks run in this process)."""


@tool
def echo(ctx: ToolContext, word: str) -> str:
    """Echo a word."""
    EXECUTED.append((ctx.run_id, ctx.tool_call_id, activity.info().attempt))
    return word


@tool
def charge(ctx: ToolContext, amount: int) -> str:
    """Charge a card: not idempotent, and its connection drops mid-call."""
    EXECUTED.append((ctx.run_id, ctx.tool_call_id, activity.info().attempt))
    raise ConnectionError("connection reset after the request was sent")


@tool(idempotent=True)
def fetch(ctx: ToolContext, key: str) -> str:
    """Read a value: idempotent; the first attempt fails."""
    attempt = activity.info().attempt
    EXECUTED.append((ctx.run_id, ctx.tool_call_id, attempt))
    if attempt == 1:
        raise ConnectionError("flaky network")
    return f"{key}=42 (attempt {attempt})"


def _executed(run_id: str) -> list[str]:
    return [call_id for rid, call_id, _ in EXECUTED if rid == run_id]


def _statuses(messages: Any) -> list[str]:
    return [r.status for r in returns(messages)]


class RecordIds(Capability):
    """Records the ids of the calls the model made, as the after-hook sees them."""

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        assert state.response is not None
        IDS_SEEN.extend(c.tool_call_id for c in state.response.tool_calls)
        return state


def _agent(name: str, script: Script, limits: Limits | None = None, **options: Any) -> Agent:
    return Agent(name=name, model=script.model, tools=[echo, charge, fetch],
                 limits=limits or Limits(), **options)


REQUESTS = Script([calls(call("echo", {"word": "a"}, "r1")), "unreachable"])
TOKENS = Script([
    calls(call("echo", {"word": "a"}, "k1")), calls(call("echo", {"word": "b"}, "k2")), "x",
])
BATCH = Script([calls(*(call("echo", {"word": w}, f"b{w}") for w in "xyz")), "unreachable"])
DUPLICATE = Script([
    calls(call("echo", {"word": "a"}, "dup"), call("echo", {"word": "b"}, "dup")), "unreachable",
])
TRUNCATED = Script([
    calls(call("echo", {"word": "half"}, "t1"), finish_reason="length"), "done",
])
IDS = Script([
    calls(call("echo", {"word": "a"}), call("echo", {"word": "b"})),
    calls(call("echo", {"word": "c"})),
    "done",
])
UNCERTAIN = Script([calls(call("charge", {"amount": 5}, "u1")), "unreachable"])
IDEMPOTENT = Script([calls(call("fetch", {"key": "k"}, "i1")), "done"])

REQUESTS_AGENT = _agent("limits-requests", REQUESTS, Limits(request_limit=1))
TOKENS_AGENT = _agent("limits-tokens", TOKENS, Limits(total_tokens_limit=20))
BATCH_AGENT = _agent("limits-batch", BATCH, Limits(tool_calls_limit=2))
DUPLICATE_AGENT = _agent("limits-duplicate", DUPLICATE)
TRUNCATED_AGENT = _agent("limits-truncated", TRUNCATED)
IDS_AGENT = _agent("limits-ids", IDS, capabilities=[RecordIds])
UNCERTAIN_AGENT = _agent("limits-uncertain", UNCERTAIN)
IDEMPOTENT_AGENT = _agent("limits-idempotent", IDEMPOTENT)
AGENTS = [REQUESTS_AGENT, TOKENS_AGENT, BATCH_AGENT, DUPLICATE_AGENT, TRUNCATED_AGENT,
          IDS_AGENT, UNCERTAIN_AGENT, IDEMPOTENT_AGENT]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    async with towline_worker(client, AGENTS) as pair:
        yield pair


async def _fails(worker: tuple[Client, str], agent: Agent, reason: str) -> RunError:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, agent, "go", task_queue=queue)
    assert info.value.reason == reason, info.value
    assert info.value.partial is not None
    assert_paired(info.value.partial)
    return info.value


async def test_request_limit_stops_before_the_next_request(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, REQUESTS_AGENT, "UsageLimitExceeded")
    assert err.partial is not None
    assert [s.run_step for s in REQUESTS.seen] == [1]
    assert err.partial.request_count == 1
    assert _executed(err.partial.run_id) == ["r1"]
    assert "request_limit" in err.message


async def test_total_tokens_limit_is_checked_after_each_response(
    worker: tuple[Client, str],
) -> None:
    err = await _fails(worker, TOKENS_AGENT, "UsageLimitExceeded")
    partial = err.partial
    assert partial is not None
    # Each response costs 15 tokens: the second crosses 20, and its call never runs.
    assert [s.run_step for s in TOKENS.seen] == [1, 2]
    assert partial.request_count == 2
    assert partial.usage.total_tokens == 30
    assert _executed(partial.run_id) == ["k1"]
    assert {r.tool_call_id: r.status for r in returns(partial.messages)} == {
        "k1": "succeeded", "k2": "not_executed",
    }


async def test_tool_calls_limit_stops_the_whole_batch(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, BATCH_AGENT, "UsageLimitExceeded")
    assert err.partial is not None
    assert _executed(err.partial.run_id) == []
    assert _statuses(err.partial.messages) == ["not_executed"] * 3
    assert err.partial.counters.tool_calls == 0
    assert err.partial.request_count == 1


async def test_duplicate_call_ids_execute_nothing(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, DUPLICATE_AGENT, "DuplicateToolCallId")
    assert err.partial is not None
    assert _executed(err.partial.run_id) == []
    assert _statuses(err.partial.messages) == ["not_executed", "not_executed"]
    assert err.partial.counters.tool_calls == 0
    assert err.partial.request_count == 1


async def test_truncated_response_executes_nothing(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, TRUNCATED_AGENT, "go", task_queue=queue)
    assert _executed(result.run_id) == []
    (ret,) = returns(result.messages)
    assert (ret.tool_call_id, ret.status) == ("t1", "not_executed")
    assert result.counters.tool_calls == 0
    assert [s.run_step for s in TRUNCATED.seen] == [1, 2]
    assert result.output == "done"
    assert_paired(result)


async def test_generated_call_ids_are_unique_and_deterministic(
    worker: tuple[Client, str],
) -> None:
    tclient, queue = worker
    handle = await start_run(tclient, IDS_AGENT, "go", task_queue=queue,
                             id=f"limits-ids-{uuid.uuid4().hex[:8]}")
    result = await handle.result()
    ids = [c.tool_call_id for m in result.messages if m.kind == "response" for c in m.tool_calls]
    assert len(ids) == 3 and all(ids) and len(set(ids)) == 3
    assert sorted(_executed(result.run_id)) == sorted(ids)  # parallel: any order
    assert [r.tool_call_id for r in returns(result.messages)] == ids
    assert IDS_SEEN == ids
    assert_paired(result)

    # Replaying the recorded history regenerates exactly the same ids.
    IDS_SEEN.clear()
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[], plugins=[TowlinePlugin([IDS_AGENT])])
    replayed = await replayer.replay_workflow(history)
    assert replayed.replay_failure is None
    assert IDS_SEEN == ids


async def test_uncertain_effect_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, UNCERTAIN_AGENT, "UncertainToolEffect")
    partial = err.partial
    assert partial is not None
    # One attempt only: the charge may have gone through, so it is never repeated.
    assert [(cid, attempt) for rid, cid, attempt in EXECUTED if rid == partial.run_id] == [
        ("u1", 1)
    ]
    assert _statuses(partial.messages) == ["unknown"]
    assert [s.run_step for s in UNCERTAIN.seen] == [1]
    assert partial.request_count == 1


async def test_idempotent_tool_is_retried_by_temporal(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, IDEMPOTENT_AGENT, "go", task_queue=queue)
    assert [(cid, attempt) for rid, cid, attempt in EXECUTED if rid == result.run_id] == [
        ("i1", 1), ("i1", 2)
    ]
    (ret,) = returns(result.messages)
    assert (ret.status, ret.content) == ("succeeded", "k=42 (attempt 2)")
    assert result.counters.tool_calls == 1
    assert result.output == "done"
    assert_paired(result)
