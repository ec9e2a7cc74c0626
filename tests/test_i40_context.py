"""Issue 40: the run's typed context, worker-side dependencies and dynamic instructions.

Real runs on the session's dev server: a context key the agent does not take ends the run
with `InvalidRunInput` naming it (it used to be dropped without a word); tools and hooks
get the context typed by the agent's `context_type`; a worker-side object that cannot be
serialised reaches tools and the instructions function through `TowlinePlugin(deps=...)`
and nothing of it reaches the history; an instructions function runs once per run (across
continue-as-new), its text recorded, and a replay never calls it; `towline run --context`
and `towline show` through the CLI.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from cli_helpers import towline, towline_process
from pydantic import BaseModel
from readme import cli_env, readme
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from examples.bank_support import DatabaseConn
from examples.bank_support import agent as bank_support
from towline import (
    Agent,
    Capability,
    InstructionsContext,
    ModelRequestState,
    RunError,
    RunInput,
    RunResult,
    ToolContext,
    TowlinePlugin,
    current_deps,
    tool,
)
from towline.client import run, with_towline
from towline.messages import Message, ModelResponse, SystemPart, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import execution_histories, towline_worker
from towline.workflows import AgentRun


class Account(BaseModel):
    """The context of the tests' agents."""

    user_id: int
    tier: str = "basic"


@dataclass
class Pool:
    """A worker-side dependency no converter can serialise (it holds a lock)."""

    secret: str = field(default_factory=lambda: f"pool-secret-{uuid.uuid4().hex}")
    lock: threading.Lock = field(default_factory=threading.Lock)
    lookups: int = 0
    instructions_calls: int = 0
    audits: list[int] = field(default_factory=list[int])

    def lookup(self, user_id: int) -> str:
        with self.lock:
            self.lookups += 1
        return f"user {user_id} on {self.secret[:4]}"


def _system(messages: list[Message]) -> list[str]:
    return [str(p.content) for m in messages for p in getattr(m, "parts", [])
            if isinstance(p, SystemPart)]


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]


def whoami_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Calls `whoami` twice (two turns), then answers with the instructions it was given."""
    done = _returns(messages)
    if len(done) < 2:
        return ModelResponse(parts=[ToolCallPart(tool_name="whoami", args={})])
    return json.dumps({"system": _system(messages), "returns": [r.content for r in done]})


@tool
def whoami(ctx: ToolContext) -> str:
    """Who the run is for, as the tool sees it."""
    pool: Pool = ctx.deps
    account = ctx.context
    return (f"{type(account).__name__}:{account.user_id}:{account.tier} "
            f"{pool.lookup(account.user_id)}")


async def account_instructions(ctx: InstructionsContext) -> str:
    pool: Pool = ctx.deps
    pool.instructions_calls += 1
    return f"You serve {pool.lookup(ctx.context.user_id)} ({type(ctx.context).__name__})."


class TierNote(Capability):
    """A hook that reads the typed context (and tries, in vain, to change it)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        account: Account = state.context
        account.tier = "hacked"  # a copy: the run's context is not changed
        note = f"tier from hook: {type(state.context).__name__}"
        return state.model_copy(update={"agent": state.agent.model_copy(
            update={"instructions": f"{state.agent.instructions} {note}"})})


@activity.defn(name="i40.audit")
async def audit(user_id: int) -> None:
    """A capability's own activity: it reaches the worker's deps through `current_deps`."""
    pool: Pool = current_deps()
    pool.audits.append(user_id)


class Audit(Capability):
    """Audits every tool call in an activity of its own, with the context's user."""

    activities = (audit,)

    async def after_tool_execute(self, ctx: ToolContext, call: Any, result: Any) -> None:
        await workflow.execute_activity(audit, ctx.context.user_id,
                                        start_to_close_timeout=timedelta(seconds=30))


typed = Agent(name="i40-typed", model=FunctionModel(whoami_model, model_name="whoami-model"),
              instructions=account_instructions, context_type=Account, tools=[whoami],
              capabilities=[TierNote(), Audit()])
untyped = Agent(name="i40-untyped", model="test")


async def test_an_unknown_context_key_ends_the_run_naming_it(client: Client) -> None:
    async with towline_worker(client, [untyped, typed], deps=Pool()) as (tc, queue):
        with pytest.raises(RunError) as no_type:
            await run(tc, untyped, "hi", task_queue=queue, context={"user_idd": 7})
        with pytest.raises(RunError) as unknown:
            await run(tc, typed, "hi", task_queue=queue, context={"user_id": 7, "teir": "gold"})
        with pytest.raises(RunError) as ill_typed:
            await run(tc, typed, "hi", task_queue=queue, context={"user_id": "seven"})
        with pytest.raises(RunError) as missing:
            await run(tc, typed, "hi", task_queue=queue)
    assert no_type.value.reason == "InvalidRunInput"
    assert "'user_idd'" in no_type.value.message and "context_type" in no_type.value.message
    assert unknown.value.reason == "InvalidRunInput"
    assert "'teir'" in unknown.value.message and "Account" in unknown.value.message
    assert ill_typed.value.reason == "InvalidRunInput" and "user_id" in ill_typed.value.message
    assert missing.value.reason == "InvalidRunInput" and "user_id" in missing.value.message
    # nothing ran: no model request, no tool
    assert ill_typed.value.partial is not None and ill_typed.value.partial.counters.requests == 0


async def test_tools_hooks_and_instructions_get_the_typed_context_and_the_deps(
    client: Client,
) -> None:
    pool = Pool()
    async with towline_worker(client, [typed], deps=pool) as (tc, queue):
        result = await run(tc, typed, "who am I?", task_queue=queue,
                           context={"user_id": 7, "tier": "gold"})
        chain = await execution_histories(tc, result.run_id)
    seen = json.loads(result.output)
    # the tool got an `Account` (gold: the hook's in-place edit reached nothing) and the pool
    assert seen["returns"] == [f"Account:7:gold user 7 on {pool.secret[:4]}"] * 2
    # the instructions came from the function (with the pool), the hook saw an Account
    assert seen["system"] == [(f"You serve user 7 on {pool.secret[:4]} (Account). "
                               "tier from hook: Account")]
    assert pool.instructions_calls == 1 and pool.lookups == 3  # once a run, not once a turn
    assert pool.audits == [7, 7]  # the capability's activity reached the same pool
    events = [e for h in chain for e in h.events]
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled.count("towline.instructions") == 1
    assert scheduled.index("towline.instructions") < scheduled.index("towline.model_request")
    # the pool's secret is nowhere in the history: the dependency was never serialised
    assert all(pool.secret.encode() not in e.SerializeToString() for e in events)


async def test_a_replay_takes_the_instructions_from_the_history(client: Client) -> None:
    pool = Pool()
    async with towline_worker(client, [typed], deps=pool) as (tc, queue):
        inp = RunInput(agent=typed.name, prompt="who am I?", context={"user_id": 3},
                       continue_as_new_after_events=8)
        handle = await tc.start_workflow("AgentRun", inp, id=f"i40-ctx-{uuid.uuid4().hex[:8]}",
                                         task_queue=queue, result_type=RunResult)
        result = await handle.result()
        chain = await execution_histories(tc, handle.id)
    assert len(chain) > 1  # it continued as new, and kept its instructions
    assert pool.instructions_calls == 1
    assert json.loads(result.output)["system"][0].startswith("You serve user 3")
    replay_pool = Pool()
    replayer = Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=[typed],
                                                                     deps=replay_pool)])
    for history in chain:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None
    assert (replay_pool.instructions_calls, replay_pool.lookups, replay_pool.audits) == (0, 0, [])


async def test_a_failing_instructions_function_ends_the_run_typed(client: Client) -> None:
    def broken(ctx: InstructionsContext) -> Any:
        return {"not": "text"}

    agent = Agent(name="i40-broken-instructions", model="test", instructions=broken)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as failed:
            await run(tc, agent, "hi", task_queue=queue)
    assert failed.value.reason == "InstructionsFailed"
    assert "returned dict, not text" in failed.value.message


async def test_the_cli_runs_with_a_context_and_shows_it(target: str) -> None:
    env = cli_env(target)
    done = await readme("towline run examples.bank_support:agent \"What is my balance?\" "
                        "--context '{\"customer_id\": 123}' --deps "
                        "examples.bank_support:DatabaseConn --id support-123", env=env)
    assert done.code == 0, done
    assert "Hello John, your current balance is $223.45." in done.out
    shown = await readme("towline show support-123", env=env)
    assert shown.code == 0, shown
    assert 'Context   {"customer_id": 123}' in shown.out
    as_json = await towline("show", "support-123", "--json", env=env)
    assert json.loads(as_json.out)["context"] == {"customer_id": 123}
    refused = await towline("run", "examples.bank_support:agent", "hi", "--context",
                            '{"customer": 123}', env=env)
    assert refused.code == 2 and "'customer'" in refused.err, refused
    assert bank_support.context_type is not None and DatabaseConn().lookups == 0


async def test_a_cli_worker_hands_its_deps_to_the_runs_it_serves(client: Client, target: str) -> None:
    queue = f"i40-deps-{uuid.uuid4().hex[:8]}"
    proc = await towline_process("worker", "--agent", "examples.bank_support:agent", "--deps",
                                 "examples.bank_support:DatabaseConn", "--task-queue", queue,
                                 env=cli_env(target))
    try:
        result = await asyncio.wait_for(run(with_towline(client, [bank_support]), bank_support,
                                            "What is my balance?", task_queue=queue,
                                            context={"customer_id": 123}), 60)
    finally:
        proc.send_signal(signal.SIGINT)
        await proc.wait()
    assert result.output == "Hello John, your current balance is $223.45."
