"""`messages` instructions: `RemoveAll()` and `Remove(id)` rewrite history, others append.

Instructions from all hooks of a turn concatenate in order. The agent's system
instructions are never stored in the canonical history: they are rendered as
their own first `ModelRequest` (a `SystemPart`) in what the model receives.
"""

from __future__ import annotations

from typing import Any

from mw_helpers import Recorder, contents, run_agent, texts_of, user
from temporalio.client import Client

from towline import (
    Agent,
    Middleware,
    ModelRequest,
    ModelResponse,
    Remove,
    RemoveAll,
    SystemPart,
    TextPart,
)

HISTORY = [
    user("first question", id="m1"),
    ModelResponse(id="m2", parts=[TextPart(content="first answer")]),
    user("second question", id="m3"),
    ModelResponse(id="m4", parts=[TextPart(content="second answer")]),
]


async def test_remove_all_then_summary_leaves_exactly_the_summary(client: Client) -> None:
    def summarise(state: dict[str, Any]) -> dict[str, Any] | None:
        if state["summarised"]:
            return None
        return {"messages": [RemoveAll(), user("summary of everything", id="summary")],
                "summarised": True}

    model = Recorder.script("mw-msg-remove-all-model", "answer")
    agent = Agent(name="mw-msg-remove-all", model=model.model(), instructions="Be brief.",
                  capabilities=[Middleware("summariser", before_model=summarise,
                                           state_schema={"summarised": False})])
    result, _ = await run_agent(client, agent, "third question", message_history=HISTORY)

    sent = model.seen[0].messages
    # what the model receives: the instructions first, as their own message, then the summary
    assert len(sent) == 2
    assert isinstance(sent[0], ModelRequest)
    assert [type(p) for p in sent[0].parts] == [SystemPart]
    assert contents(sent[0]) == ["Be brief."]
    assert sent[1].id == "summary" and contents(sent[1]) == ["summary of everything"]
    # the canonical history: exactly the summary, then the answer; no system part stored
    assert [m.id for m in result.messages[:1]] == ["summary"]
    assert texts_of(result.messages) == ["summary of everything", "answer"]
    assert not any(isinstance(p, SystemPart) for m in result.messages for p in m.parts)


async def test_remove_one_message_by_id(client: Client) -> None:
    def forget_m2(state: dict[str, Any]) -> dict[str, Any] | None:
        ids = [m.id for m in state["messages"]]
        return {"messages": [Remove(id="m2")]} if "m2" in ids else None

    model = Recorder.script("mw-msg-remove-model", "answer")
    agent = Agent(name="mw-msg-remove", model=model.model(),
                  capabilities=[Middleware("forgetter", before_model=forget_m2)])
    result, _ = await run_agent(client, agent, "third question", message_history=HISTORY)

    assert [m.id for m in model.seen[0].messages][:3] == ["m1", "m3", "m4"]
    assert len(model.seen[0].messages) == len(HISTORY)  # four, less one, plus the prompt
    assert texts_of(result.messages) == [
        "first question", "second question", "second answer", "third question", "answer",
    ]


async def test_instructions_of_all_hooks_concatenate_in_order(client: Client) -> None:
    def first(state: dict[str, Any]) -> dict[str, Any] | None:
        if any(m.id == "summary" for m in state["messages"]):
            return None
        return {"messages": [RemoveAll(), user("summary", id="summary")]}

    def second(state: dict[str, Any]) -> dict[str, Any] | None:
        # sees the first hook's rewrite already, and appends after it
        assert [m.id for m in state["messages"]][:1] == ["summary"]
        if any(m.id == "note" for m in state["messages"]):
            return None
        return {"messages": user("a note", id="note")}

    def after(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [Remove(id="note"), user("after the answer")]}

    model = Recorder.script("mw-msg-concat-model", "answer")
    agent = Agent(name="mw-msg-concat", model=model.model(), capabilities=[
        Middleware("first", before_model=first),
        Middleware("second", before_model=second, after_model=after),
    ])
    result, _ = await run_agent(client, agent, "question", message_history=HISTORY)

    assert texts_of(model.seen[0].messages) == ["summary", "a note"]
    assert texts_of(result.messages) == ["summary", "answer", "after the answer"]
    assert all(m.id for m in result.messages)
