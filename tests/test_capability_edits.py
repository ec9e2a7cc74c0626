"""Legitimate model-hook edits stand: model, projection, settings, tools, instructions, response.

The model must receive exactly what a before-hook selected, the canonical history
must keep what the projection hid, a selected tool's `max_retries` governs its
retries, and an after-hook's rewritten response is the run's output.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns
from towline import (
    Agent,
    Capability,
    Message,
    ModelRequest,
    ModelRequestState,
    ModelRetry,
    SystemPart,
    TextPart,
    UserPart,
    tool,
)
from towline.client import run
from towline.testing import towline_worker


@tool
def lookup(topic: str) -> str:
    """Look a topic up; always asks for another try."""
    raise ModelRetry(f"nothing on {topic}, try again")


@tool
def unused(x: int) -> int:
    """A tool the hook does not select."""
    return x


def _redact(messages: list[Message]) -> list[Message]:
    """The messages with the password replaced in user prompts."""
    out: list[Message] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            parts = [
                p.model_copy(update={"content": p.text.replace("hunter2", "[redacted]")})
                if isinstance(p, UserPart) else p
                for p in m.parts
            ]
            m = m.model_copy(update={"parts": parts})
        out.append(m)
    return out


class Select(Capability):
    """Selects another model, redacts what is sent, and narrows and edits the request."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        chosen = [
            d.model_copy(update={"max_retries": 7})
            for d in state.params.function_tools if d.name == "lookup"
        ]
        return state.model_copy(update={
            "model": "other",
            "request_messages": _redact(state.messages),
            "settings": state.settings.model_copy(update={"temperature": 0.3}),
            "params": state.params.model_copy(update={"function_tools": chosen}),
            "agent": state.agent.model_copy(update={"instructions": "Edited instructions."}),
        })


class Rewrite(Capability):
    """Rewrites the response text after the model answered."""

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        assert state.response is not None
        response = state.response.model_copy(
            update={"parts": [TextPart(content=f"rewritten: {state.response.text}")]}
        )
        return state.model_copy(update={"response": response})


DEFAULT = Script(["the default model answered"])
OTHER = Script(
    [calls(call("lookup", {"topic": "cats"}, f"l{i}")) for i in range(1, 4)] + ["found it"],
    name="other",
)
PLAIN = Script(["original answer"])

SELECTING = Agent(
    name="edits-select", model=DEFAULT.model, instructions="Original instructions.",
    tools=[lookup, unused], capabilities=[Select],
)
REWRITING = Agent(name="edits-rewrite", model=PLAIN.model, capabilities=[Rewrite])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for the module; `other` is a model hooks can select by name."""
    async with towline_worker(client, [SELECTING, REWRITING], models={"other": OTHER.model}) as w:
        yield w


async def test_before_hook_selections_reach_the_model(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, SELECTING, "my password is hunter2", task_queue=queue)

    assert DEFAULT.seen == []
    assert [s.run_step for s in OTHER.seen] == [1, 2, 3, 4]
    for seen in OTHER.seen:
        assert seen.info.model_name == "other"
        assert seen.info.settings.temperature == 0.3
        assert [(t.name, t.max_retries) for t in seen.info.tools] == [("lookup", 7)]
        first = seen.messages[0]
        assert isinstance(first, ModelRequest)
        assert first.parts == [SystemPart(content="Edited instructions.")]
        sent = [p.content for m in seen.messages if isinstance(m, ModelRequest)
                for p in m.parts if isinstance(p, UserPart)]
        assert sent == ["my password is [redacted]"]

    # The projection never touched the canonical history.
    prompts = [p.content for m in result.messages if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, UserPart)]
    assert prompts == ["my password is hunter2"]
    # The selected definition's max_retries (7) governs: three retries in a row are allowed.
    assert [r.status for r in returns(result.messages)] == ["retry", "retry", "retry"]
    assert result.output == "found it"
    assert result.counters.tool_retries == {"lookup": 3}
    assert_paired(result)


async def test_after_hook_rewrite_is_the_output(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, REWRITING, "answer", task_queue=queue)
    assert result.output == "rewritten: original answer"
    assert result.messages[-1].kind == "response"
    assert result.messages[-1].parts == [TextPart(content="rewritten: original answer")]
