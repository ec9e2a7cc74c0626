"""HistoryWindow in real runs: the model sees only the last messages; history keeps all.

The window never splits a tool call from its return (it shrinks past orphaned
returns, and grows back only when nothing would be left), keeps the system
messages of older history first, and leaves the canonical history untouched.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, text
from towline import Agent, tool
from towline.capabilities import HistoryWindow
from towline.capabilities.history_window import window
from towline.client import run
from towline.errors import ConfigurationError
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    RetryPart,
    SystemPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.testing import towline_worker


@tool
def lookup(n: int) -> str:
    """Look up item n."""
    return f"item {n}"


def shape(messages: list[Message]) -> list[tuple[Any, ...]]:
    """A compact description of messages: one tuple per part, per message."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        parts: list[Any] = []
        for p in m.parts:
            if isinstance(p, SystemPart):
                parts.append(("system", p.content))
            elif isinstance(p, UserPart):
                parts.append(("user", p.content))
            elif isinstance(p, TextPart):
                parts.append(("text", p.content))
            elif isinstance(p, ToolCallPart):
                parts.append(("call", p.tool_call_id))
            elif isinstance(p, ToolReturnPart):
                parts.append(("return", p.tool_call_id, p.content))
            elif isinstance(p, RetryPart):
                parts.append(("retry", p.tool_call_id))
        out.append(tuple(parts))
    return out


HOUSE_RULES = ModelRequest(parts=[SystemPart(content="house rules")])


def three_lookups() -> Script:
    return Script([
        calls(call("lookup", {"n": 1}, "c1")),
        calls(call("lookup", {"n": 2}, "c2")),
        calls(call("lookup", {"n": 3}, "c3")),
        text("done"),
    ])


async def test_the_model_sees_the_window_and_history_keeps_everything(client: Client) -> None:
    script = three_lookups()
    agent = Agent(name="hw-window", model=script.model, tools=[lookup], instructions="Be brief.",
                  capabilities=[HistoryWindow(max_messages=3)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "find things", task_queue=queue,
                           message_history=[HOUSE_RULES])

    assert result.output == "done"
    seen = [s.messages for s in script.seen]
    instructions = (("system", "Be brief."),)
    rules = (("system", "house rules"),)
    # step 1 and 2: everything fits
    assert shape(seen[0]) == [instructions, rules, (("user", "find things"),)]
    assert shape(seen[1]) == [instructions, rules, (("user", "find things"),), (("call", "c1"),),
                              (("return", "c1", "item 1"),)]
    # step 3: the last three messages would start with the return of c1, whose call is
    # outside the window: the window shrinks to the c2 pair; the house rules stay first
    assert shape(seen[2]) == [instructions, rules, (("call", "c2"),),
                              (("return", "c2", "item 2"),)]
    # step 4: the last three messages start with the orphaned c2 return: left out
    assert shape(seen[3]) == [instructions, rules, (("call", "c3"),),
                              (("return", "c3", "item 3"),)]
    for messages in seen:
        assert_paired(messages)

    # the canonical history is untouched: every message, in order, ids unchanged
    assert shape(result.messages) == [
        rules, (("user", "find things"),),
        (("call", "c1"),), (("return", "c1", "item 1"),),
        (("call", "c2"),), (("return", "c2", "item 2"),),
        (("call", "c3"),), (("return", "c3", "item 3"),),
        (("text", "done"),),
    ]
    assert_paired(result)
    assert [m.id for m in seen[3][-2:]] == [m.id for m in result.messages[-3:-1]]


async def test_a_window_of_one_grows_to_keep_the_newest_return_with_its_call(
    client: Client,
) -> None:
    script = three_lookups()
    agent = Agent(name="hw-one", model=script.model, tools=[lookup],
                  capabilities=[HistoryWindow(1)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "find things", task_queue=queue)

    seen = [shape(s.messages) for s in script.seen]
    assert seen[0] == [(("user", "find things"),)]
    # the newest message is a return: it is never sent without its call
    assert seen[1] == [(("call", "c1"),), (("return", "c1", "item 1"),)]
    assert seen[3] == [(("call", "c3"),), (("return", "c3", "item 3"),)]
    assert len(result.messages) == 8
    assert_paired(result)


# --- the window function --------------------------------------------------------------


def _call(cid: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool_name="lookup", tool_call_id=cid)])


def _ret(*cids: str) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart(tool_name="lookup", tool_call_id=c) for c in cids])


def _user(content: str, system: str | None = None) -> ModelRequest:
    parts: list[Any] = [SystemPart(content=system)] if system else []
    return ModelRequest(parts=[*parts, UserPart(content=content)])


def test_window_keeps_short_histories_whole() -> None:
    history: list[Message] = [_user("a"), _call("x"), _ret("x")]
    assert window(history, 3) == history
    assert window(history, 10) == history


def test_window_keeps_only_the_system_parts_of_a_cut_mixed_message() -> None:
    history: list[Message] = [_user("old prompt", system="rules"), _call("x"), _ret("x"),
                               _user("new prompt")]
    got = window(history, 1)
    assert shape(got) == [(("system", "rules"),), (("user", "new prompt"),)]


def test_window_never_orphans_a_parallel_batch_of_returns() -> None:
    history: list[Message] = [
        _user("go"),
        ModelResponse(parts=[ToolCallPart(tool_name="lookup", tool_call_id="a"),
                             ToolCallPart(tool_name="lookup", tool_call_id="b")]),
        _ret("a", "b"),
        ModelResponse(parts=[TextPart(content="ok")]),
        _user("more"),
    ]
    assert shape(window(history, 3)) == [(("text", "ok"),), (("user", "more"),)]
    got = window(history, 4)
    assert shape(got) == shape(history[1:])
    assert_paired(got)


def test_max_messages_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        HistoryWindow(0)
