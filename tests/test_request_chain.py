"""Model requests of constant size: messages named by one chained key, fetched on a miss.

The first tests drive the two halves of the protocol directly (the workflow's
`RequestBook`, a worker's `RequestCache`, the query answer going through JSON as
it does on the wire). The others read real histories: the model input stays the
same size at every step and in every execution after continue-as-new, and a
worker that never saw the conversation (another worker, a restarted one) fetches
it from the workflow and the model still gets all of it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import uuid4

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from towline import Agent, Capability, ModelRequestState, tool
from towline.activities.request_cache import RequestCache
from towline.client import run
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelConnectionError, ModelInfo
from towline.results import RunInput, RunResult
from towline.runtime.plugin import TowlinePlugin
from towline.runtime.request_chain import (
    ROOT,
    ChainedRequest,
    RequestAnswer,
    RequestBook,
    RequestChain,
    RequestDefinitions,
    RequestQuery,
    chain_keys,
)
from towline.testing import history_events, run_to_end, towline_worker
from towline.tools import ToolDefinition

DEFS = RequestDefinitions(tools=[ToolDefinition(name="add", description="Add.")])


def _user(text: str, id: str) -> ModelRequest:
    return ModelRequest(id=id, parts=[UserPart(content=text)])


def _call(n: int) -> ModelResponse:
    return ModelResponse(id=f"r{n}", parts=[ToolCallPart(tool_name="add", args={"a": n},
                                                         tool_call_id=f"c{n}")])


def _return(n: int, content: Any = None) -> ModelRequest:
    return ModelRequest(id=f"q{n}", parts=[ToolReturnPart(tool_name="add", tool_call_id=f"c{n}",
                                                          content=n if content is None else content)])


class Wire:
    """A workflow's book and a worker's cache, talking through JSON as over the wire."""

    def __init__(self, book: RequestBook | None = None, cache: RequestCache | None = None) -> None:
        self.book = book or RequestBook()
        self.cache = cache or RequestCache()
        self.sizes: list[int] = []
        self.sent: list[ChainedRequest] = []

    async def ask(self, query: RequestQuery) -> RequestAnswer:
        on_wire = RequestQuery.model_validate_json(query.model_dump_json())
        return RequestAnswer.model_validate_json(self.book.answer(on_wire).model_dump_json())

    async def send(self, messages: list[Message], answer: Message | None = None) -> list[Message]:
        request, _ = self.book.open(messages, DEFS)
        wire = type(request).model_validate_json(request.model_dump_json())
        self.sizes.append(len(request.model_dump_json()))
        self.sent.append(wire)
        got, defs, key = await self.cache.resolve(wire, "run-1", self.ask)
        assert defs == DEFS
        assert key == chain_keys(ROOT, messages)[-1]
        if answer is not None:
            self.cache.produced(key, got, answer, "run-1")
            self.book.answered(request.n, answer)
        self.book.close(request.n)
        return got


async def test_requests_stay_the_same_size_as_the_conversation_grows() -> None:
    wire = Wire()
    history: list[Message] = [_user("go", "u")]
    for n in range(1, 40):
        sent = [ModelRequest(id="instructions", parts=[SystemPart(content="Be exact.")]), *history]
        assert await wire.send(sent, _call(n)) == sent  # the model gets every message
        history += [_call(n), _return(n)]
    assert wire.cache.queries == 0
    assert wire.sizes[0] > max(wire.sizes[1:])  # the first request carries the definitions
    assert max(wire.sizes[2:]) - min(wire.sizes[2:]) <= 6  # then: constant (numbers grow a digit)


async def test_the_assembled_requests_a_worker_keeps_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long conversation's requests each name all of it: the cache keeps the newest whole,
    older ones only while they fit `LIST_ITEMS`, and rebuilds any other from its messages."""
    from towline.activities import request_cache

    monkeypatch.setattr(request_cache, "LIST_ITEMS", 60)
    wire = Wire()
    history: list[Message] = [_user("go", "u")]
    for n in range(1, 40):
        assert await wire.send(history, _call(n)) == history
        history += [_call(n), _return(n)]
        held = [len(m) for m in wire.cache._lists.values()]  # pyright: ignore[reportPrivateUsage]
        assert sum(held) <= 60 or len(held) == 1, held
    assert wire.cache.queries == 0  # nothing was asked again: the messages are held by key
    older = history[:21]  # a request whose list was let go: assembled again, not fetched
    assert await wire.send(older) == older
    assert wire.cache.queries == 0


async def test_a_worker_that_lacks_messages_fetches_only_what_it_lacks() -> None:
    wire = Wire()
    history: list[Message] = [_user("go", "u")]
    for n in range(1, 6):
        await wire.send(history, _call(n))
        history += [_call(n), _return(n)]
    other = Wire(wire.book)  # another worker: an empty cache
    assert await other.send(history, _call(6)) == history
    assert other.cache.queries == 1
    history += [_call(6), _return(6)]
    # Back on the first worker: it lacks the last exchange (served by the other one), and
    # fetches the messages after the newest key it holds, not the whole conversation.
    asked: list[RequestAnswer] = []

    async def recording(query: RequestQuery) -> RequestAnswer:
        asked.append(await wire.ask(query))
        return asked[-1]

    request, _ = wire.book.open(history, DEFS)
    got, _, _ = await wire.cache.resolve(request, "run-1", recording)
    assert got == history
    # It holds up to its own last answer (c5): it lacks q5, c6 (the other worker's) and q6.
    assert asked[0].after == chain_keys(ROOT, history[:10])[-1]
    assert asked[0].messages == history[10:]


async def test_projections_and_large_messages() -> None:
    wire = Wire()
    history: list[Message] = [_user("go", "u")]
    for n in range(1, 4):
        await wire.send(history, _call(n))
        history += [_call(n), _return(n)]
    # A hook sends only the last messages: those sent before go by content reference.
    window = history[-3:]
    assert await wire.send(window) == window
    request = wire.sent[-1]
    assert request.prev == ROOT
    assert [isinstance(m, str) for m in request.new] == [True, True, False]
    assert wire.cache.queries == 0
    # A message too large to write into the history twice is fetched, not sent.
    longer = [*history, _user("x" * 20_000, "big")]
    assert await wire.send(longer) == longer
    assert wire.sizes[-1] < 500
    assert wire.cache.queries == 1


async def test_a_carried_chain_is_trusted_only_if_the_messages_match() -> None:
    wire = Wire()
    history: list[Message] = [_user("go", "u")]
    for n in range(1, 4):
        await wire.send(history, _call(n))
        history += [_call(n), _return(n)]
    carried = wire.book.last_chain()
    assert carried is not None and carried.length == len(history) - 1
    resumed = Wire(RequestBook(carried=carried), wire.cache)  # continue-as-new
    request, _ = resumed.book.open(history, DEFS)
    assert request.prev == chain_keys(ROOT, history[:-1])[-1] and len(request.new) == 1
    forged = RequestBook(carried=RequestChain(key=carried.key, length=2))
    request, _ = forged.open(history, DEFS)
    assert request.prev == ROOT  # the carried key does not cover those two messages


async def test_a_wrong_answer_is_refused() -> None:
    wire = Wire()
    request, _ = wire.book.open([_user("go", "u")], DEFS)

    async def lying(query: RequestQuery) -> RequestAnswer:
        return RequestAnswer(after=ROOT, messages=[_user("something else", "u")], definitions=DEFS)

    empty = RequestCache(nodes=0, lists=0)
    with pytest.raises(ApplicationError, match="do not match"):
        await empty.resolve(request.model_copy(update={"new": ["nope"]}), "run-1", lying)


# --- real runs -------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


seen: list[list[Message]] = []


def adder(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    seen.append(list(messages))
    steps = int(str(messages[1].parts[0].content))  # type: ignore[union-attr]
    if info.run_step <= steps:
        return ModelResponse(parts=[ToolCallPart(tool_name="add", args={"a": info.run_step, "b": 1})])
    return f"done after {len(messages)} messages"


adding = Agent(name="chain-adder", model=FunctionModel(adder, model_name="chain-adder"),
               instructions="Add.", tools=[add])


def _model_inputs(events: list[HistoryEvent]) -> list[dict[str, Any]]:
    return [json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
            for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "towline.model_request"]


async def test_the_model_input_is_the_same_size_at_every_step(client: Client) -> None:
    seen.clear()
    async with towline_worker(client, [adding]) as (tclient, queue):
        result = await run(tclient, adding, "30", task_queue=queue)
        events = await history_events(tclient.get_workflow_handle(result.run_id))
    assert result.output == "done after 62 messages"
    assert [len(m) for m in seen] == [2 + 2 * i for i in range(31)]  # everything, every time
    inputs = _model_inputs(events)
    sizes = [len(json.dumps(i, separators=(",", ":"))) for i in inputs]
    assert "definitions" in inputs[0]["chain"] and all("definitions" not in i["chain"] for i in inputs[1:])
    assert max(sizes[2:]) - min(sizes[2:]) <= 4, sizes
    assert all(len(i["chain"]["new"]) == 1 for i in inputs[1:])  # only the new tool return


def _chain_of(events: list[HistoryEvent]) -> str | None:
    first = events[0].workflow_execution_started_event_attributes.input.payloads[0]
    return json.loads(first.data).get("resume", {}).get("chain", {}).get("key")


async def test_continue_as_new_keeps_the_requests_small(client: Client) -> None:
    async with towline_worker(client, [adding]) as (tclient, queue):
        result, histories = await run_to_end(
            tclient, RunInput(agent=adding.name, prompt="12", continue_as_new_after_events=40),
            task_queue=queue, id=f"chain-can-{uuid4().hex[:8]}")
    assert result.output == "done after 26 messages"
    assert len(histories) >= 3
    for events in histories[1:]:
        assert _chain_of(events) is not None  # continue-as-new carried the last key
        first = _model_inputs(events)[0]["chain"]
        assert first["prev"] and len(first["new"]) == 1  # not the whole conversation


async def test_another_worker_fetches_what_it_lacks(client: Client) -> None:
    """Worker A serves three steps and goes away; worker B, which never saw the run, goes on."""
    gone = asyncio.Event()
    seen_by: dict[str, list[int]] = {"a": [], "b": []}

    def model_of(name: str) -> FunctionModel:
        def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
            if name == "a" and info.run_step > 3:
                gone.set()
                raise ModelConnectionError("worker A is going away")  # retried: on B
            seen_by[name].append(len(messages))
            return adder(messages, info)

        return FunctionModel(answer, model_name="chain-handover")

    def agent_on(name: str) -> Agent:
        return Agent(name="chain-handover", model=model_of(name), instructions="Add.", tools=[add])

    queue = f"tq-{uuid4().hex[:12]}"
    plugin_a, plugin_b = TowlinePlugin([agent_on("a")]), TowlinePlugin([agent_on("b")])
    config = client.config()
    client_a = Client(**{**config, "plugins": [plugin_a]})
    client_b = Client(**{**config, "plugins": [plugin_b]})
    handle = await client_a.start_workflow(
        "AgentRun", RunInput(agent="chain-handover", prompt="6"), id=f"chain-handover-{uuid4().hex[:8]}",
        task_queue=queue, result_type=RunResult)
    async with Worker(client_a, task_queue=queue):
        await asyncio.wait_for(gone.wait(), 60)
    async with Worker(client_b, task_queue=queue):
        result = await asyncio.wait_for(handle.result(), 120)
    assert result.output == "done after 14 messages"
    assert seen_by["a"] == [2, 4, 6]
    assert seen_by["b"] == [8, 10, 12, 14]  # all of it, from the first request on
    assert plugin_b.model_activities.requests.queries == 1  # fetched once, then held


class Windowed(Capability):
    """Sends the model the instructions' first user message and the last two messages."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        messages = state.request_messages
        return state.model_copy(update={"request_messages": [messages[0], *messages[-2:]]
                                        if len(messages) > 3 else messages})


def windowed_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    seen.append(list(messages))
    if info.run_step <= 5:
        return ModelResponse(parts=[ToolCallPart(tool_name="add", args={"a": info.run_step, "b": 1})])
    return ModelResponse(parts=[TextPart(content="done")])


async def test_a_projected_request_reaches_the_model_exactly(client: Client) -> None:
    seen.clear()
    agent = Agent(name="chain-windowed", model=FunctionModel(windowed_model, model_name="chain-windowed"),
                  tools=[add], capabilities=[Windowed()])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "go", task_queue=queue)
    assert result.output == "done"
    assert [len(m) for m in seen] == [1, 3, 3, 3, 3, 3]
    assert seen[-1] == [result.messages[0], *result.messages[-3:-1]]


async def test_a_key_evicted_while_asking_is_fetched_whole() -> None:
    wire = Wire()
    history: list[Message] = [_user("go", "u")]
    for n in range(1, 4):
        await wire.send(history, _call(n))
        history += [_call(n), _return(n)]
    other = Wire(wire.book)
    await other.send(history, _call(4))  # another worker answers a step: ours lacks it
    history += [_call(4), _return(4)]
    asked: list[RequestQuery] = []

    async def evicting(query: RequestQuery) -> RequestAnswer:
        asked.append(query)
        wire.cache._nodes.clear()  # pyright: ignore[reportPrivateUsage] - meanwhile, evicted
        wire.cache._lists.clear()  # pyright: ignore[reportPrivateUsage]
        return await wire.ask(query)

    request, _ = wire.book.open(history, DEFS)
    got, _, _ = await wire.cache.resolve(request, "run-1", evicting)
    assert got == history
    assert [bool(q.have) for q in asked] == [True, False]
