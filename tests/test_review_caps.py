"""Review probes: edge cases of the built-in capabilities in real runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from towline import Agent, ModelRequest, ModelResponse, TextPart, Tool, ToolCallPart, tool
from towline.capabilities import (
    CompletionGate,
    ContextEditing,
    HistoryWindow,
    ModelFallback,
    RedactPII,
    Subagent,
    Summarization,
    ToolApproval,
    ToolSelector,
)
from towline.client import run
from towline.errors import ConfigurationError, RunError
from towline.messages import Message, SystemPart, ToolReturnPart, UserPart
from towline.models import FunctionModel, ModelHTTPError, ModelInfo
from towline.testing import towline_worker


class Answer(BaseModel):
    city: str


def calls_of(m: Message) -> list[str]:
    return [c.tool_call_id for c in m.tool_calls] if isinstance(m, ModelResponse) else []


def assert_paired_in_order(messages: list[Message]) -> None:
    """Each response's calls are answered by the messages right after it, before any user text."""
    for i, m in enumerate(messages):
        ids = set(calls_of(m))
        if not ids:
            continue
        nxt = messages[i + 1]
        assert isinstance(nxt, ModelRequest), messages
        answered = {p.tool_call_id for p in nxt.parts if isinstance(p, ToolReturnPart)}
        assert ids <= answered, (i, messages)
        kinds = [type(p).__name__ for p in nxt.parts]
        assert kinds.index("UserPart") > max(
            j for j, k in enumerate(kinds) if k == "ToolReturnPart"
        ) if "UserPart" in kinds else True, kinds


async def test_gate_bouncing_structured_output_keeps_call_and_return_adjacent(
    client: Client,
) -> None:
    seen: list[list[Message]] = []

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse:
        seen.append(messages)
        city = "Lyon" if len(seen) == 1 else "Paris"
        return ModelResponse(parts=[ToolCallPart(
            tool_name=info.output_tools[0].name, args={"city": city}, kind="output")])

    agent = Agent(name="rv-gate-structured", model=FunctionModel(answer, model_name="rv-gs"),
                  output_type=Answer,
                  capabilities=[CompletionGate(lambda t: "Paris" in t or "wrong city")])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "capital?", task_queue=queue)
    assert result.output == Answer(city="Paris")
    for msgs in [*seen, result.messages]:
        assert_paired_in_order(list(msgs))


async def test_fallback_to_an_unknown_model_fails_with_the_primary_error(client: Client) -> None:
    def fail(messages: list[Message], info: ModelInfo) -> str:
        raise ModelHTTPError(400, "primary refuses")

    agent = Agent(name="rv-fb-unknown", model=FunctionModel(fail, model_name="rv-fb-primary"),
                  capabilities=[ModelFallback("rv-no-such-model")])
    async with towline_worker(client, [agent]) as (tc, queue):
        try:
            await asyncio.wait_for(run(tc, agent, "hi", task_queue=queue), 30)
        except RunError as e:
            err = e
        else:
            raise AssertionError("expected failure")
    assert err.reason == "ModelRequestFailed", err
    assert "primary refuses" in err.message


@tool
def probe(q: str) -> str:
    """A probe."""
    return f"probed {q}"


@tool
def leaf_only(q: str) -> str:
    """Only the leaf has it."""
    return "should not run"


def delegating(name: str, tool_name: str, seen: list[ModelInfo]) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(info)
        rets = [p for m in messages if isinstance(m, ModelRequest)
                for p in m.parts if isinstance(p, ToolReturnPart)]
        if not rets:
            return ModelResponse(parts=[ToolCallPart(tool_name=tool_name, args={"prompt": "go"})])
        return f"{name}<{rets[-1].status}: {rets[-1].content}>"

    return FunctionModel(answer, model_name=name)


async def test_subagents_nest_two_levels_under_the_root_authority(client: Client) -> None:
    leaf_seen: list[ModelInfo] = []
    mid_seen: list[ModelInfo] = []
    root_seen: list[ModelInfo] = []

    def leaf_answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        leaf_seen.append(info)
        if len(messages) == 1:
            return ModelResponse(parts=[
                ToolCallPart(tool_name="probe", args={"q": "a"}),
                ToolCallPart(tool_name="leaf_only", args={"q": "b"}),
            ])
        rets = [p for m in messages if isinstance(m, ModelRequest)
                for p in m.parts if isinstance(p, ToolReturnPart)]
        return ",".join(f"{r.tool_name}:{r.status}" for r in rets)

    leaf = Agent(name="rv-leaf", model=FunctionModel(leaf_answer, model_name="rv-leaf-m"),
                 tools=[probe, leaf_only])
    mid = Agent(name="rv-mid", model=delegating("mid", "task", mid_seen), tools=[probe, leaf_only],
                capabilities=[Subagent(leaf)])
    root = Agent(name="rv-root", model=delegating("root", "task", root_seen), tools=[probe],
                 capabilities=[Subagent(mid)])
    async with towline_worker(client, [root]) as (tc, queue):
        result = await run(tc, root, "go", task_queue=queue)
    print(result.output)
    assert result.output == "root<succeeded: mid<succeeded: probe:succeeded,leaf_only:denied>>"
    assert sorted(t.name for t in leaf_seen[0].tools) == ["probe"]


async def test_block_never_puts_the_value_in_the_error(client: Client) -> None:
    secret = "alice.smith@example.com"

    @tool
    def fetch_user(q: str) -> str:
        """Fetch a user."""
        return f"user {q}: {secret}"

    for where, prompt, reply in [
        ("input", f"mail {secret}", "ok"),
        ("output", "hi", f"write to {secret}"),
        ("tool_results", "hi", None),
    ]:
        def answer(messages: list[Message], info: ModelInfo, reply: str | None = reply
                   ) -> ModelResponse | str:
            if reply is None and len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart(tool_name="fetch_user", args={"q": "1"})])
            return reply or "done"

        agent = Agent(name=f"rv-block-{where}", model=FunctionModel(answer, model_name=f"rv-b-{where}"),
                      tools=[fetch_user],
                      capabilities=[RedactPII(strategy="block", apply_to=[where])])  # type: ignore[list-item]
        async with towline_worker(client, [agent]) as (tc, queue):
            try:
                await run(tc, agent, prompt, task_queue=queue)
            except RunError as e:
                err = e
            else:
                raise AssertionError(where)
        assert err.reason == "ContentBlocked", (where, err)
        assert secret not in str(err) and "alice" not in err.message, (where, err)
        if where == "output":
            assert err.partial is not None
            assert secret not in err.partial.model_dump_json()


def _summariser(asked: list[list[Message]]) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> str:
        asked.append(messages)
        return "SUMMARY"

    return FunctionModel(answer, model_name="rv-summ")


async def test_summarization_keeps_a_seeded_system_prompt_first_and_verbatim(
    client: Client,
) -> None:
    asked: list[list[Message]] = []
    seen: list[list[Message]] = []

    def main(messages: list[Message], info: ModelInfo) -> str:
        seen.append(messages)
        return "fine"

    seeded: list[Message] = [
        ModelRequest(id="sys", parts=[SystemPart(content="You are a pirate.")]),
        ModelRequest(parts=[UserPart(content="one")]),
        ModelResponse(parts=[TextPart(content="ONE")]),
        ModelRequest(parts=[UserPart(content="two")]),
        ModelResponse(parts=[TextPart(content="TWO")]),
    ]
    agent = Agent(name="rv-summ-sys", model=FunctionModel(main, model_name="rv-summ-main"),
                  capabilities=[Summarization("rv-summ", trigger_messages=3, keep=1)])
    async with towline_worker(client, [agent], models={"rv-summ": _summariser(asked)}) as (
        tc, queue,
    ):
        result = await run(tc, agent, "three", task_queue=queue, message_history=seeded)

    assert len(asked) == 1
    summarised = "\n".join(p.text for m in asked[0] for p in m.parts
                           if isinstance(p, UserPart))
    assert "User: one" in summarised and "pirate" not in summarised
    # the model sees the seeded system prompt first, then the summary, then the kept message
    first = seen[0]
    assert first[0] == seeded[0]
    assert isinstance(first[1].parts[0], UserPart)
    assert first[1].parts[0].text.startswith("Summary of the earlier conversation:")
    assert [m.id for m in result.messages[:1]] == ["sys"]
    assert result.messages[0] == seeded[0]


@pytest.mark.parametrize("build", [
    lambda: HistoryWindow(max_messages="5"),  # type: ignore[arg-type]
    lambda: HistoryWindow(max_messages=2.5),  # type: ignore[arg-type]
    lambda: HistoryWindow(max_messages=True),
    lambda: Summarization("m", trigger_tokens="100"),  # type: ignore[arg-type]
    lambda: Summarization("m", trigger_messages=5, keep="2"),  # type: ignore[arg-type]
    lambda: Summarization("m", trigger_tokens=100, timeout=30),  # type: ignore[arg-type]
    lambda: ContextEditing(trigger_chars="100"),  # type: ignore[arg-type]
    lambda: ContextEditing(exclude_tools="read_plan"),  # type: ignore[arg-type]
    lambda: ContextEditing(placeholder=None),  # type: ignore[arg-type]
    lambda: ToolSelector("m", max_tools="3"),  # type: ignore[arg-type]
    lambda: CompletionGate(lambda t: True, max_attempts="3"),  # type: ignore[arg-type]
    lambda: CompletionGate(rubric_model="m", rubric=42),  # type: ignore[arg-type]
    lambda: ToolApproval(tools=["x"], timeout=30),  # type: ignore[arg-type]
    lambda: ToolApproval(tools=["x"], timeout=timedelta(0)),
])
def test_wrongly_typed_options_are_configuration_errors(build: Callable[[], object]) -> None:
    with pytest.raises(ConfigurationError):
        build()


def test_context_editing_takes_exclude_tools_as_a_list() -> None:
    assert ContextEditing(exclude_tools=["a", "b"]).exclude_tools == frozenset({"a", "b"})  # type: ignore[arg-type]


RAW = ["alice@example.com", "555-123-4567", "4111 1111 1111 1111", "10.0.0.1"]


@tool
def customer(name: str) -> dict[str, object]:
    """Look a customer up."""
    return {"name": name, "contact": [RAW[0], {"card": RAW[2]}]}


@pytest.mark.parametrize("strategy", ["redact", "mask", "hash"])
async def test_each_strategy_keeps_raw_values_from_the_model_everywhere(
    client: Client, strategy: str,
) -> None:
    seen: list[list[Message]] = []

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(messages)
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart(tool_name="customer", args={"name": "Bo"})])
        return f"Mail {RAW[0]} or call {RAW[1]}; host {RAW[3]}."

    agent = Agent(name=f"rv-pii-{strategy}", tools=[customer],
                  model=FunctionModel(answer, model_name=f"rv-pii-{strategy}"),
                  capabilities=[RedactPII(strategy=strategy)])  # type: ignore[arg-type]
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, f"I am {RAW[0]}, card {RAW[2]}, ip {RAW[3]}",
                           task_queue=queue)
        await run(tc, agent, "again", task_queue=queue, message_history=result.messages)

    sent = "\n".join(m.model_dump_json() for msgs in seen for m in msgs)
    for value in RAW:
        assert value not in sent, (strategy, value)
        assert value not in str(result.output)
    assert [p.status for m in result.messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)] == ["succeeded"]


async def test_approval_timeouts_deny_each_listed_call_of_a_response(client: Client) -> None:
    ran: list[int] = []

    @tool
    def pay(amount: int) -> str:
        """Pay (needs approval)."""
        ran.append(amount)
        return "paid"

    told: list[list[tuple[str, str, str]]] = []

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        if len(messages) == 1:
            return ModelResponse(parts=[
                ToolCallPart(tool_name="pay", args={"amount": 1}, tool_call_id="p1"),
                ToolCallPart(tool_name="pay", args={"amount": 2}, tool_call_id="p2"),
            ])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        told.append([(p.tool_call_id, p.status, str(p.content)) for p in last.parts
                     if isinstance(p, ToolReturnPart)])
        return "ok"

    agent = Agent(name="rv-approval-2", tools=[pay],
                  model=FunctionModel(answer, model_name="rv-approval-2"),
                  capabilities=[ToolApproval(tools=["pay"], timeout=timedelta(milliseconds=200))])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "pay twice", task_queue=queue)
    assert ran == []
    assert [(i, s) for i, s, _ in told[0]] == [("p1", "denied"), ("p2", "denied")]
    assert all("not approved" in c for _, _, c in told[0])
    assert result.counters.tool_calls == 0


async def test_selector_ignores_always_include_names_the_agent_lacks(client: Client) -> None:
    def f(q: str) -> str:
        """A tool."""
        return q

    tools = [Tool.from_function(f, name=f"t_{n}") for n in "abcd"]
    offered: list[list[str]] = []

    def main(messages: list[Message], info: ModelInfo) -> str:
        offered.append(sorted(t.name for t in info.tools))
        return "done"

    def selector(messages: list[Message], info: ModelInfo) -> str:
        return '["t_c", "nope"]'

    agent = Agent(name="rv-sel-unknown", tools=tools,
                  model=FunctionModel(main, model_name="rv-sel-main"),
                  capabilities=[ToolSelector("rv-sel", max_tools=1, always_include=["ghost"])])
    async with towline_worker(client, [agent], models={
        "rv-sel": FunctionModel(selector, model_name="rv-sel")}) as (tc, queue):
        result = await run(tc, agent, "go", task_queue=queue)
    assert result.output == "done"
    assert offered == [["t_c"]]
