"""ContextEditing in real runs: old tool outputs are cleared from the request, not history.

Once the request's content exceeds `trigger_chars`, every tool return but the
last `keep_last` is sent with the placeholder as its content; calls, ids and
statuses stay, so pairing holds; the canonical history keeps the real results.
"""

from __future__ import annotations

import pytest
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import Agent, tool
from towline.capabilities import ContextEditing
from towline.capabilities.context_editing import clear_tool_returns, request_chars
from towline.client import run
from towline.errors import ConfigurationError
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.testing import towline_worker

PAGE = 300


@tool
def fetch(page: int) -> str:
    """Fetch a page (long output)."""
    return f"page {page}: " + "x" * PAGE


@tool
def note(page: int) -> str:
    """Keep a note (long output, never cleared)."""
    return f"note {page}: " + "n" * PAGE


def contents(messages: list[Message]) -> list[str]:
    return [str(r.content)[:7] for r in returns(messages)]


async def test_old_tool_returns_are_cleared_in_the_request_once_over_the_trigger(
    client: Client,
) -> None:
    script = Script([
        calls(call("fetch", {"page": 1}, "p1")),
        calls(call("fetch", {"page": 2}, "p2")),
        calls(call("fetch", {"page": 3}, "p3"), call("note", {"page": 3}, "n3")),
        text("read them all"),
    ])
    agent = Agent(name="ce-clear", model=script.model, tools=[fetch, note],
                  capabilities=[ContextEditing(trigger_chars=500, keep_last=1,
                                               placeholder="[cleared]",
                                               exclude_tools=frozenset({"note"}))])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "read", task_queue=queue)

    seen = [s.messages for s in script.seen]
    # step 2: one page (~310 chars) is under the trigger: nothing changes
    assert contents(seen[1]) == ["page 1:"]
    # step 3: two pages exceed it: all but the last return are cleared
    assert contents(seen[2]) == ["[cleare", "page 2:"]
    # step 4: the excluded tool's output stays, the newest other return is kept
    assert contents(seen[3]) == ["[cleare", "[cleare", "page 3:", "note 3:"]
    cleared = [r for r in returns(seen[3]) if r.content == "[cleared]"]
    assert [(r.tool_call_id, r.tool_name, r.status) for r in cleared] == [
        ("p1", "fetch", "succeeded"), ("p2", "fetch", "succeeded")]
    for messages in seen:
        assert_paired(messages)
    # the user prompt and the calls are sent as they are
    assert isinstance(seen[3][0], ModelRequest)
    assert seen[3][0].parts == [UserPart(content="read")]
    assert [m.id for m in seen[3]] == [m.id for m in result.messages[:-1]]

    # the canonical history keeps every result in full
    assert [len(str(r.content)) for r in returns(result.messages)] == [308, 308, 308, 308]
    assert_paired(result)


async def test_under_the_trigger_the_request_is_sent_as_it_is(client: Client) -> None:
    script = Script([calls(call("fetch", {"page": 1}, "p1")),
                     calls(call("fetch", {"page": 2}, "p2")), text("ok")])
    agent = Agent(name="ce-under", model=script.model, tools=[fetch],
                  capabilities=[ContextEditing(trigger_chars=10_000, keep_last=0)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "read", task_queue=queue)
    assert contents(script.seen[2].messages) == ["page 1:", "page 2:"]
    assert script.seen[2].messages == result.messages[:-1]


# --- the edit itself ------------------------------------------------------------------


def _history(n: int) -> list[Message]:
    out: list[Message] = [ModelRequest(parts=[UserPart(content="go")])]
    for i in range(n):
        out.append(ModelResponse(parts=[ToolCallPart(tool_name="fetch", args={"page": i},
                                                     tool_call_id=f"p{i}")]))
        out.append(ModelRequest(parts=[ToolReturnPart(tool_name="fetch", tool_call_id=f"p{i}",
                                                      content={"body": "y" * 50},
                                                      status="failed" if i == 0 else "succeeded")]))
    return out


def test_clearing_is_idempotent_and_keeps_pairs_and_statuses() -> None:
    history = _history(4)
    once = clear_tool_returns(history, 2, "[gone]")
    assert clear_tool_returns(once, 2, "[gone]") == once
    assert [r.content for r in returns(once)] == ["[gone]", "[gone]", {"body": "y" * 50},
                                                  {"body": "y" * 50}]
    assert [r.status for r in returns(once)] == [r.status for r in returns(history)]
    assert [m.id for m in once] == [m.id for m in history]
    assert once[1] is history[1]  # untouched messages are the same objects
    assert_paired(once)
    assert request_chars(once) < request_chars(history)


def test_keep_last_zero_clears_every_return_and_large_keep_clears_none() -> None:
    history = _history(3)
    assert {str(r.content) for r in returns(clear_tool_returns(history, 0, "-"))} == {"-"}
    assert clear_tool_returns(history, 5, "-") == history


def test_options_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        ContextEditing(trigger_chars=-1)
    with pytest.raises(ConfigurationError):
        ContextEditing(keep_last=-1)
