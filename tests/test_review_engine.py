"""Adversarial checks of the engine's invariants in actual runs (real dev server).

Each test drives a run into a corner a hook, a tool or a model can reach: odd
values that must fail the *run* with a typed, non-retryable error carrying the
partial (never the workflow task, which would leave the run stuck), in-place
mutation of what hooks receive, reused call ids, limits before their I/O.
Every run is bounded by `_bounded` so a stuck workflow fails the test instead
of hanging it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from pydantic import BaseModel
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import (
    Agent,
    Capability,
    Limits,
    Middleware,
    ModelRequestState,
    ModelResponse,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolResult,
    ToolReturn,
    Usage,
    tool,
)
from towline.client import run
from towline.errors import RunError
from towline.messages import Message, ModelRequest, ToolCallPart, UserPart
from towline.models import ModelInfo
from towline.results import RunResult
from towline.testing import towline_worker

T = TypeVar("T")

EXECUTED: list[str] = []
"""Run ids of every execution of `noop` (tools run in this process)."""
SEEN_TOOL_CALLS: list[int] = []
"""`state.tool_calls` as the hook after a sneaky one saw it."""


@tool
def noop(ctx: ToolContext) -> str:
    """Does nothing, visibly."""
    EXECUTED.append(ctx.run_id)
    return "ok"


@tool
def secret(ctx: ToolContext) -> dict[str, str]:
    """Returns a structured result."""
    EXECUTED.append(ctx.run_id)
    return {"secret": "s3cr3t"}


@tool
def costly(ctx: ToolContext) -> ToolResult:
    """Reports model usage it incurred (like a sub-agent)."""
    EXECUTED.append(ctx.run_id)
    return ToolResult(content="spent", usage=Usage(requests=1, input_tokens=500, output_tokens=500))


async def _explode(ctx: ToolContext) -> str:
    raise RuntimeError("child workflow blew up")


EXPLODING = Tool.from_function(_explode, name="explode", in_workflow=True)


async def _bounded(awaitable: Awaitable[T]) -> T:
    """A stuck run (a failing workflow task is retried forever) fails the test, not hangs it."""
    return await asyncio.wait_for(awaitable, timeout=20)


# --- a model whose response does not decode ------------------------------------------


@dataclass(frozen=True)
class MalformedModel:
    """Answers a tool call whose arguments are a list (as a broken provider adapter might)."""

    model_name: str = "review-malformed"

    @property
    def name(self) -> str:
        return self.model_name

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        part = ToolCallPart.model_construct(
            part_kind="tool_call", tool_name="noop", args=["not", "a", "dict"],
            tool_call_id="m1", kind="function", metadata={},
        )
        return ModelResponse.model_construct(
            kind="response", id="", parts=[part], usage=Usage(), model_name=self.model_name,
            finish_reason="tool_calls",
        )


# --- hooks returning odd values --------------------------------------------------------


class ToolsByName(Capability):
    """Selects tools by name instead of by definition (a plausible hook bug)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        params = state.params.model_copy(update={"function_tools": ["noop"]})
        return state.model_copy(update={"params": params})


class ListArgsAfter(Capability):
    """Rewrites the response's tool call so that its arguments are a list."""

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        assert state.response is not None
        parts = [p.model_copy(update={"args": ["x"]}) if isinstance(p, ToolCallPart) else p
                 for p in state.response.parts]
        response = state.response.model_copy(update={"parts": parts})
        return state.model_copy(update={"response": response})


async def _fabricate(request: Any, next: Any) -> ModelResponse:
    response: ModelResponse = await next(request)
    bad = ToolCallPart(tool_name="noop", tool_call_id="w1").model_copy(update={"args": "x"})
    return response.model_copy(update={"parts": [bad]})


class StringArgsBefore(Capability):
    """`before_tool_execute` returns a call whose arguments are a string."""

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        return call.model_copy(update={"args": "x"}) if call.tool_call_id == "s1" else call


def _bad_reducer(old: Any, new: Any) -> Any:
    return old + new  # int + str: a reducer bug


class Sneaky(ModelRequestState):
    """A state subclass whose `model_copy` keeps what the hook wrote."""

    def model_copy(self, *, update: Any = None, deep: bool = False) -> Any:
        return self


class WritesThroughSubclass(Capability):
    """Writes `tool_calls` through a subclass that ignores `model_copy` updates."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return Sneaky.model_construct(**{**state.__dict__, "tool_calls": 99})


class SeesToolCalls(Capability):
    """Records the `tool_calls` it is given."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        SEEN_TOOL_CALLS.append(state.tool_calls)
        return state


# --- hooks mutating what they receive in place ------------------------------------------


class MutateResult(Capability):
    """`after_tool_execute` "redacts" the result it was given to observe."""

    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> None:
        if isinstance(result.content, dict):
            result.content["secret"] = "***"  # pyright: ignore[reportUnknownMemberType]
        call.metadata["touched"] = True


class MutateRequest(Capability):
    """Redacts `request_messages` in place (a plausible, wrong implementation)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        for m in state.request_messages:
            for i, p in enumerate(m.parts):
                if getattr(p, "content", None) == "my password is hunter2":
                    parts: list[Any] = m.parts
                    parts[i] = p.model_copy(update={"content": "[redacted]"})
        return state


class LeakSettings(Capability):
    """Mutates the settings object it is given in place."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        state.settings.extra[state.run_id] = True
        return state


class AddsOutputTool(Capability):
    """Offers an output tool to an agent whose output is text."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        extra = ToolDefinition(name="final_result", kind="output")
        return state.model_copy(update={"params": state.params.model_copy(
            update={"output_tools": [extra]})})


class Opaque:
    """Not JSON: cannot be persisted in the run state."""


def _end_on_reused_id(state: dict[str, Any]) -> dict[str, Any] | None:
    last = state["messages"][-1]
    if isinstance(last, ModelResponse) and len(state["messages"]) > 2 and last.tool_calls:
        return {"jump_to": "end"}
    return None


def _tools_jump(state: dict[str, Any]) -> dict[str, Any] | None:
    last = state["messages"][-1]
    if isinstance(last, ModelResponse) and len(last.tool_calls) == 2:
        return {"jump_to": "tools"}
    return None


async def _best_of_two(request: Any, next: Any) -> ModelResponse:
    await next(request)
    return await next(request)


class City(BaseModel):
    """The final answer."""

    city: str


# --- scripts and agents -----------------------------------------------------------------

TOOLS_BY_NAME = Script([calls(call("noop", {}, "n1")), "done"])
LIST_ARGS = Script([calls(call("noop", {}, "l1")), "done"])
WRAP = Script([calls(call("noop", {}, "w0")), "done"])
STRING_ARGS = Script([calls(call("noop", {}, "s1"), call("noop", {}, "s2")), "done"])
REDUCER = Script(["done"])
EXPLODE = Script([calls(call("explode", {}, "e1")), "done"])
MUTATE_RESULT = Script([calls(call("secret", {}, "r1", metadata={"origin": "model"})), "done"])
MUTATE_REQUEST = Script(["done"])
LEAK = Script(["done", "done"])
REUSED = Script([calls(call("noop", {}, "dup")), calls(call("noop", {}, "dup")), "done"])
TOOLS_JUMP = Script([
    calls(call("noop", {}, "f1"), call("final_result", {"city": "Oslo"}, "o1", kind="output")),
    '{"city": "Oslo"}',
])
TOKENS_WRAP = Script([text("first"), text("second")])
TOKENS_TOOL = Script([calls(call("costly", {}, "c1")), "done"])
SUBCLASS = Script(["done"])
OUTPUT_TOOL = Script([calls(call("final_result", {}, "x1", kind="output")), "done"])
DANGLING = Script(["done"])
OPAQUE = Script(["done"])
OPAQUE_REDUCER = Script(["done"])

AGENTS = {
    "malformed": Agent(name="review-malformed", model=MalformedModel(), tools=[noop]),
    "tools_by_name": Agent(name="review-tools-by-name", model=TOOLS_BY_NAME.model, tools=[noop],
                           capabilities=[ToolsByName]),
    "list_args": Agent(name="review-list-args", model=LIST_ARGS.model, tools=[noop],
                       capabilities=[ListArgsAfter]),
    "wrap": Agent(name="review-wrap-args", model=WRAP.model, tools=[noop],
                  capabilities=[Middleware("fabricate", wrap_model_call=_fabricate)]),
    "string_args": Agent(name="review-string-args", model=STRING_ARGS.model, tools=[noop],
                         capabilities=[StringArgsBefore]),
    "reducer": Agent(name="review-reducer", model=REDUCER.model, capabilities=[
        Middleware("counter", before_model=lambda s: {"n": "one"},
                   state_schema={"n": (0, _bad_reducer)}),
    ]),
    "explode": Agent(name="review-explode", model=EXPLODE.model, tools=[EXPLODING]),
    "mutate_result": Agent(name="review-mutate-result", model=MUTATE_RESULT.model, tools=[secret],
                           capabilities=[MutateResult]),
    "mutate_request": Agent(name="review-mutate-request", model=MUTATE_REQUEST.model,
                            capabilities=[MutateRequest]),
    "leak": Agent(name="review-leak", model=LEAK.model, capabilities=[LeakSettings]),
    "reused": Agent(name="review-reused-id", model=REUSED.model, tools=[noop], capabilities=[
        Middleware("end-on-reuse", after_model=_end_on_reused_id),
    ]),
    "tools_jump": Agent(name="review-tools-jump", model=TOOLS_JUMP.model, tools=[noop],
                        output_type=City,
                        capabilities=[Middleware("to-tools", after_model=_tools_jump)]),
    "tokens_wrap": Agent(name="review-tokens-wrap", model=TOKENS_WRAP.model,
                         limits=Limits(total_tokens_limit=10),
                         capabilities=[Middleware("best-of-two", wrap_model_call=_best_of_two)]),
    "tokens_tool": Agent(name="review-tokens-tool", model=TOKENS_TOOL.model, tools=[costly],
                         limits=Limits(total_tokens_limit=100)),
    "output_tool": Agent(name="review-output-tool", model=OUTPUT_TOOL.model,
                         capabilities=[AddsOutputTool]),
    "dangling": Agent(name="review-dangling", model=DANGLING.model, tools=[noop]),
    "opaque": Agent(name="review-opaque", model=OPAQUE.model, capabilities=[
        Middleware("stash", before_model=lambda s: {"obj": Opaque()}, state_schema={"obj": None}),
    ]),
    "opaque_reducer": Agent(name="review-opaque-reducer", model=OPAQUE_REDUCER.model, capabilities=[
        Middleware("tally", before_model=lambda s: {"n": 1},
                   state_schema={"n": (0, lambda old, new: Opaque())}),
    ]),
    "subclass": Agent(name="review-subclass", model=SUBCLASS.model,
                      capabilities=[WritesThroughSubclass, SeesToolCalls]),
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    async with towline_worker(client, list(AGENTS.values())) as pair:
        yield pair


async def _ok(
    worker: tuple[Client, str], key: str, prompt: str = "go", **options: Any
) -> RunResult:
    tclient, queue = worker
    return await _bounded(run(tclient, AGENTS[key], prompt, task_queue=queue, **options))


async def _fails(worker: tuple[Client, str], key: str) -> RunError:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await _bounded(run(tclient, AGENTS[key], "go", task_queue=queue))
    assert info.value.partial is not None, "a failed run carries its partial"
    assert_paired(info.value.partial)
    return info.value


# --- deterministic errors fail the run, not the workflow task ---------------------------


async def test_undecodable_model_response_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "malformed")
    assert err.reason == "ModelRequestFailed"
    assert err.partial is not None and err.partial.run_id not in EXECUTED


async def test_tools_selected_by_name_fail_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "tools_by_name")
    assert err.reason == "CapabilityViolation"
    assert "ToolsByName.before_model_request" in err.message
    assert TOOLS_BY_NAME.seen == []  # the model is never called


async def test_after_hook_giving_non_dict_args_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "list_args")
    assert err.reason == "CapabilityViolation"
    assert "ListArgsAfter.after_model_request" in err.message
    assert err.partial is not None and err.partial.run_id not in EXECUTED


async def test_wrapper_giving_non_dict_args_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "wrap")
    assert err.reason == "CapabilityViolation"
    assert "fabricate" in err.message
    assert err.partial is not None and err.partial.run_id not in EXECUTED


async def test_before_tool_hook_giving_non_dict_args_skips_that_call(
    worker: tuple[Client, str],
) -> None:
    result = await _ok(worker, "string_args")
    assert result.output == "done"
    statuses = {r.tool_call_id: r.status for r in returns(result.messages)}
    assert statuses == {"s1": "not_executed", "s2": "succeeded"}
    assert EXECUTED.count(result.run_id) == 1
    assert_paired(result)


async def test_raising_reducer_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "reducer")
    assert err.reason == "CapabilityViolation"
    assert "'n'" in err.message


async def test_raising_in_workflow_tool_is_an_uncertain_effect(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "explode")
    assert err.reason == "UncertainToolEffect"
    assert err.partial is not None
    recorded = [(r.tool_call_id, r.status) for r in returns(err.partial.messages)]
    assert recorded == [("e1", "unknown")]
    assert err.partial.counters.tool_calls == 1
    assert [s.run_step for s in EXPLODE.seen] == [1]  # the model is not asked to repeat it


async def test_state_subclass_cannot_keep_written_counters(worker: tuple[Client, str]) -> None:
    SEEN_TOOL_CALLS.clear()
    result = await _ok(worker, "subclass")
    assert result.output == "done"
    assert SEEN_TOOL_CALLS == [0]


# --- what hooks receive is theirs: mutating it in place changes nothing confirmed --------


async def test_after_tool_hook_cannot_rewrite_the_confirmed_result(
    worker: tuple[Client, str],
) -> None:
    result = await _ok(worker, "mutate_result")
    [ret] = returns(result.messages)
    assert ret.content == {"secret": "s3cr3t"}
    [response] = [m for m in result.messages if isinstance(m, ModelResponse) and m.tool_calls]
    assert response.tool_calls[0].metadata == {"origin": "model"}
    # and what the model was sent next is the confirmed result too
    [sent] = returns(MUTATE_RESULT.seen[1].messages)
    assert sent.content == {"secret": "s3cr3t"}


async def test_in_place_request_edit_does_not_touch_the_history(worker: tuple[Client, str]) -> None:
    result = await _ok(worker, "mutate_request", prompt="my password is hunter2")
    first: Any = result.messages[0]
    assert [p.content for p in first.parts] == ["my password is hunter2"]


async def test_settings_mutated_in_place_do_not_leak_into_other_runs(
    worker: tuple[Client, str],
) -> None:
    first = await _ok(worker, "leak")
    second = await _ok(worker, "leak")
    seen = {s.info.settings.extra.get(first.run_id, False) for s in LEAK.seen
            if s.info.settings.extra.get(second.run_id)}
    assert seen == {False}, "run 2's request carried run 1's in-place settings edit"


# --- pairing ----------------------------------------------------------------------------


async def test_reused_call_id_is_still_paired_when_the_run_ends(worker: tuple[Client, str]) -> None:
    result = await _ok(worker, "reused")
    assert_paired(result)
    assert [r.status for r in returns(result.messages)] == ["succeeded", "not_executed"]


async def test_tools_jump_pairs_the_output_call_too(worker: tuple[Client, str]) -> None:
    result = await _ok(worker, "tools_jump")
    assert result.output.model_dump() == {"city": "Oslo"}
    assert_paired(result)
    assert_paired(TOOLS_JUMP.seen[1].messages)  # the model was never sent an unpaired call


# --- token limits are checked before the next request ------------------------------------


async def test_token_limit_stops_a_wrappers_second_request(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "tokens_wrap")
    assert err.reason == "UsageLimitExceeded"
    assert len(TOKENS_WRAP.seen) == 1
    assert err.partial is not None and err.partial.request_count == 1


async def test_token_limit_counts_tool_usage_before_the_next_request(
    worker: tuple[Client, str],
) -> None:
    err = await _fails(worker, "tokens_tool")
    assert err.reason == "UsageLimitExceeded"
    assert [s.run_step for s in TOKENS_TOOL.seen] == [1]
    assert err.partial is not None and err.partial.counters.run_step == 1


async def test_output_tool_offered_to_a_text_agent_is_not_an_output(
    worker: tuple[Client, str],
) -> None:
    result = await _ok(worker, "output_tool")
    assert result.output == "done"
    assert [(r.tool_call_id, r.status) for r in returns(result.messages)] == [("x1", "denied")]


async def test_dangling_call_in_the_given_history_is_closed(worker: tuple[Client, str]) -> None:
    history: list[Message] = [
        ModelRequest(parts=[UserPart(content="earlier")]),
        calls(call("noop", {}, "h1")),
    ]
    result = await _ok(worker, "dangling", message_history=history)
    assert result.output == "done"
    assert_paired(result)
    assert_paired(DANGLING.seen[-1].messages)  # nor is the model sent an unpaired call
    assert result.run_id not in EXECUTED


async def test_state_value_that_is_not_json_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "opaque")
    assert err.reason == "CapabilityViolation"
    assert "stash.before_model" in err.message and "'obj'" in err.message
    assert OPAQUE.seen == []


async def test_reducer_result_that_is_not_json_fails_the_run(worker: tuple[Client, str]) -> None:
    err = await _fails(worker, "opaque_reducer")
    assert err.reason == "CapabilityViolation"
    assert "'n'" in err.message


async def test_reused_call_ids_get_distinct_idempotency_keys(client: Client) -> None:
    """Providers may number calls from call_0 in every response: keys must still differ."""
    keys: list[str] = []

    @tool(idempotent=True)
    def remember(ctx: ToolContext) -> str:
        """Record the idempotency key."""
        keys.append(ctx.idempotency_key)
        return "ok"

    script = Script([calls(call("remember", {}, "call_0")), calls(call("remember", {}, "call_0")),
                     text("done")])
    agent = Agent(name="review-reused-keys", model=script.model, tools=[remember])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)
    assert len(keys) == 2 and len(set(keys)) == 2
    assert keys == [f"{result.run_id}/1/call_0", f"{result.run_id}/2/call_0"]
