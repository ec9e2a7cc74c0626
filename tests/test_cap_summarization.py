"""Summarization in real runs: old history is replaced by a summary, durably and paired.

When the history exceeds the trigger, `before_model` asks the summariser model
(an activity) for a summary of everything before the cut, and rewrites the
canonical history to `[summary, *kept]`; the model sees exactly that; every
kept tool return keeps its call; the summariser's usage reaches the run's usage
and the ledger (RunResult.counters and the memo snapshots in the history).
"""

from __future__ import annotations

import itertools

import pytest
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import Agent, tool
from towline.capabilities import Summarization
from towline.capabilities.summarization import estimate_tokens, split_for_summary, transcript
from towline.client import start_run
from towline.errors import ConfigurationError
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult
from towline.runtime.ledger import counters_from_history
from towline.testing import history_events, towline_worker

SUMMARY_USAGE = Usage(requests=1, input_tokens=100, output_tokens=7)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Summariser:
    """A summariser model that records what it was asked."""

    def __init__(self, name: str) -> None:
        self.asked: list[tuple[list[Message], ModelInfo]] = []
        self.model = FunctionModel(self._answer, model_name=name)

    def _answer(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        self.asked.append((messages, info))
        return ModelResponse(parts=[TextPart(content=f"SUMMARY-{len(self.asked)}")],
                             usage=SUMMARY_USAGE)


def user_texts(messages: list[Message]) -> list[str]:
    return [p.text for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, UserPart)]


async def test_old_history_is_replaced_by_a_summary_keeping_pairs(client: Client) -> None:
    summariser = Summariser("summ-a")
    script = Script([
        calls(call("weather", {"city": "Oslo"}, "w1")),
        calls(call("weather", {"city": "Rome"}, "w2")),
        text("Oslo and Rome are sunny."),
    ])
    # keep=1 would keep only the return of w2: its call is kept too
    agent = Agent(name="summ-run", model=script.model, tools=[weather], instructions="Be brief.",
                  capabilities=[Summarization("summ-a", trigger_messages=4, keep=1)])
    async with towline_worker(client, [agent], models={"summ-a": summariser.model}) as (tc, q):
        handle = await start_run(tc, agent, "weather in Oslo and Rome?", task_queue=q)
        result: RunResult = await handle.result()
        events = await history_events(handle)

    assert result.output == "Oslo and Rome are sunny."
    # steps 1 and 2 are under the trigger (1 and 3 messages): no summary
    assert len(summariser.asked) == 1
    asked, info = summariser.asked[0]
    assert info.run_step == 3 and info.agent == "summ-run"
    assert isinstance(asked[0], ModelRequest) and isinstance(asked[0].parts[0], SystemPart)
    prompt = user_texts(asked)[0]
    assert "User: weather in Oslo and Rome?" in prompt
    assert "Tool weather returned (succeeded): sunny in Oslo" in prompt
    assert "sunny in Rome" not in prompt and '"Rome"' not in prompt  # kept pair: not summarised

    # the model at step 3 sees exactly: instructions, summary, the kept call and return
    seen = script.seen[2].messages
    assert len(seen) == 4
    assert seen[0] == ModelRequest(id="instructions", parts=[SystemPart(content="Be brief.")])
    assert user_texts(seen[1:2]) == ["Summary of the earlier conversation:\n\nSUMMARY-1"]
    assert isinstance(seen[2], ModelResponse) and seen[2].tool_calls[0].tool_call_id == "w2"
    assert [r.tool_call_id for r in returns(seen)] == ["w2"]
    assert_paired(seen)

    # the canonical history was rewritten the same way (and the final answer appended)
    history = result.messages
    assert [m.id for m in history[:3]] == [m.id for m in seen[1:]]
    assert isinstance(history[3], ModelResponse) and history[3].text == result.output
    assert len(history) == 4
    assert_paired(result)

    # the summariser's call was an activity: three model requests plus one summary
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled.count("towline.model_request") == 4
    # its usage reached the run's usage and the ledger (3 x 10/5 from the script's model)
    assert result.usage.input_tokens == 3 * 10 + 100
    assert result.usage.output_tokens == 3 * 5 + 7
    assert (result.counters.input_tokens, result.counters.output_tokens) == (130, 22)
    assert result.counters.requests == 3  # the run's own requests
    snapshots = counters_from_history(events)
    assert snapshots[-1] == result.counters
    jumps = [b.input_tokens - a.input_tokens for a, b in itertools.pairwise(snapshots)]
    assert 110 in jumps  # step 3 committed its model call and the summary together


async def test_a_later_summary_folds_in_the_previous_one(client: Client) -> None:
    summariser = Summariser("summ-b")
    script = Script([calls(call("weather", {"city": f"c{i}"}, f"w{i}")) for i in range(1, 5)]
                    + [text("done")])
    agent = Agent(name="summ-twice", model=script.model, tools=[weather],
                  capabilities=[Summarization("summ-b", trigger_messages=4, keep=2)])
    async with towline_worker(client, [agent], models={"summ-b": summariser.model}) as (tc, q):
        handle = await start_run(tc, agent, "go", task_queue=q)
        result: RunResult = await handle.result()

    # 5 messages before steps 3, 4 and 5: each summarises down to [summary, call, return]
    assert [info.run_step for _, info in summariser.asked] == [3, 4, 5]
    assert "SUMMARY-1" in user_texts(summariser.asked[1][0])[0]
    assert "SUMMARY-2" in user_texts(summariser.asked[2][0])[0]
    assert [len(s.messages) for s in script.seen] == [1, 3, 3, 3, 3]
    assert user_texts(result.messages)[0].endswith("SUMMARY-3")
    assert len(result.messages) == 4
    for s in script.seen:
        assert_paired(s.messages)
    assert_paired(result)
    assert result.counters.input_tokens == 5 * 10 + 3 * 100


# --- the pure parts -------------------------------------------------------------------


def test_the_cut_moves_earlier_to_keep_every_kept_return_with_its_call() -> None:
    history: list[Message] = [
        ModelRequest(parts=[UserPart(content="go")]),
        ModelResponse(parts=[ToolCallPart(tool_name="weather", tool_call_id="a"),
                             ToolCallPart(tool_name="weather", tool_call_id="b")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="weather", tool_call_id="a")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="weather", tool_call_id="b")]),
    ]
    older, kept = split_for_summary(history, 1)
    assert older == history[:1] and kept == history[1:]
    older, kept = split_for_summary(history, 4)
    assert older == [] and kept == history


def test_the_token_estimate_is_deterministic_chars_over_four() -> None:
    messages: list[Message] = [ModelRequest(parts=[UserPart(content="x" * 400)])]
    first = estimate_tokens(messages)
    assert first == estimate_tokens(list(messages))
    assert 100 <= first <= 120
    bigger: list[Message] = [*messages, ModelResponse(parts=[TextPart(content="y" * 400)])]
    assert estimate_tokens(bigger) > first + 99
    cap = Summarization("m", trigger_tokens=150)
    assert not cap.triggered(messages) and cap.triggered(bigger)


def test_transcript_renders_every_kind_of_part() -> None:
    rendered = transcript([
        ModelRequest(parts=[SystemPart(content="rules"), UserPart(content="hi")]),
        ModelResponse(parts=[TextPart(content="calling"),
                             ToolCallPart(tool_name="weather", args={"city": "Oslo"})]),
        ModelRequest(parts=[ToolReturnPart(tool_name="weather", tool_call_id="x",
                                           content={"t": 3}, status="failed")]),
    ])
    assert rendered.splitlines() == [
        "System: rules", "User: hi", "Assistant: calling",
        'Assistant called weather({"city": "Oslo"})',
        'Tool weather returned (failed): {"t": 3}',
    ]


def test_options_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        Summarization("m")  # no trigger
    with pytest.raises(ConfigurationError):
        Summarization("m", trigger_messages=3, keep=3)
    with pytest.raises(ConfigurationError):
        Summarization("m", trigger_tokens=100, keep=0)
    with pytest.raises(ConfigurationError):
        Summarization("", trigger_tokens=100)
