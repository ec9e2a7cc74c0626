"""CompletionGate in real runs: bad answers bounce back with feedback, good ones pass."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from towline import Agent, ModelRequest, ModelResponse, TextPart, ToolCallPart, Usage, tool
from towline.capabilities import CompletionGate
from towline.client import run
from towline.errors import ConfigurationError
from towline.messages import Message, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker


def user_texts(messages: list[Message]) -> list[str]:
    return [p.text for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, UserPart)]


def scripted(name: str, answers: list[str | ModelResponse], seen: list[list[Message]]
             ) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> str | ModelResponse:
        seen.append(messages)
        return answers[min(len(seen), len(answers)) - 1]

    return FunctionModel(answer, model_name=name)


def mentions_paris(text: str) -> bool | str:
    return True if "Paris" in text else "Name the capital city explicitly."


async def test_a_bad_answer_is_bounced_with_feedback_and_a_good_one_passes(client: Client) -> None:
    seen: list[list[Message]] = []
    model = scripted("gate-main", ["It is a city in France.", "The capital is Paris."], seen)
    agent = Agent(name="gate-pass", model=model,
                  capabilities=[CompletionGate(mentions_paris, max_attempts=3)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is the capital of France?", task_queue=queue)

    assert result.output == "The capital is Paris."
    assert len(seen) == 2
    # the second request carries the rejected answer and the feedback, in order
    second = seen[1]
    assert isinstance(second[-2], ModelResponse) and second[-2].text == "It is a city in France."
    feedback = user_texts(second)[-1]
    assert "Name the capital city explicitly." in feedback
    assert "attempt 1 of 3" in feedback
    # the canonical history keeps the bounce, and the gate's progress is in the state
    assert user_texts(result.messages) == ["What is the capital of France?", feedback]
    assert result.state["completion_gate"] == {"attempts": 2, "verdict": "passed", "feedback": None}
    assert result.counters.run_step == 2


async def test_the_gate_gives_up_after_max_attempts(client: Client) -> None:
    seen: list[list[Message]] = []
    model = scripted("gate-giveup", ["Lyon?", "Marseille?", "Nice?", "never asked"], seen)
    agent = Agent(name="gate-giveup", model=model,
                  capabilities=[CompletionGate(lambda text: False, max_attempts=3)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "Capital?", task_queue=queue)

    assert len(seen) == 3  # three answers checked, then the last is let through
    assert result.output == "Nice?"
    assert len(user_texts(result.messages)) == 1 + 2  # the prompt and two bounces
    state = result.state["completion_gate"]
    assert state["verdict"] == "gave_up" and state["attempts"] == 3


async def test_tool_calls_are_not_checked_and_pairing_holds(client: Client) -> None:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return "Paris"

    checked: list[str] = []

    def check(text: str) -> bool | str:
        checked.append(text)
        return "Paris" in text or "Cite the lookup."

    seen: list[list[Message]] = []
    model = scripted("gate-tools", [
        ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"q": "capital"},
                                          tool_call_id="l1")]),
        "No idea.",
        "Paris, per the lookup.",
    ], seen)
    agent = Agent(name="gate-tools", model=model, tools=[lookup],
                  capabilities=[CompletionGate(check, max_attempts=2)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "Capital?", task_queue=queue)

    assert checked == ["No idea.", "Paris, per the lookup."]
    assert result.output == "Paris, per the lookup."
    calls = [c.tool_call_id for m in result.messages if isinstance(m, ModelResponse)
             for c in m.tool_calls]
    returns = [p.tool_call_id for m in result.messages if isinstance(m, ModelRequest)
               for p in m.parts if p.part_kind == "tool_return"]
    assert calls == returns == ["l1"]


async def test_a_rubric_model_judges_and_its_usage_reaches_the_ledger(client: Client) -> None:
    reviews: list[list[Message]] = []
    verdicts = ["FAIL\nGive a number, not words.", "PASS"]
    rubric_usage = Usage(requests=1, input_tokens=40, output_tokens=4)

    def reviewer(messages: list[Message], info: ModelInfo) -> ModelResponse:
        reviews.append(messages)
        return ModelResponse(parts=[TextPart(content=verdicts[len(reviews) - 1])],
                             usage=rubric_usage)

    seen: list[list[Message]] = []
    model = scripted("gate-rubric-main", ["forty-two", "42"], seen)
    agent = Agent(name="gate-rubric", model=model, capabilities=[
        CompletionGate(rubric_model="reviewer", rubric="The answer is a numeral.")])
    models = {"reviewer": FunctionModel(reviewer, model_name="reviewer")}
    async with towline_worker(client, [agent], models=models) as (tc, queue):
        result = await run(tc, agent, "Six times seven?", task_queue=queue)

    assert result.output == "42"
    assert "Give a number, not words." in user_texts(seen[1])[-1]
    review = user_texts(reviews[0])[-1]
    assert "The answer is a numeral." in review and "Six times seven?" in review
    assert "forty-two" in review
    main_usage = Usage(requests=1, input_tokens=10, output_tokens=5)
    assert result.counters.input_tokens == 2 * (main_usage.input_tokens + rubric_usage.input_tokens)
    output = 2 * (main_usage.output_tokens + rubric_usage.output_tokens)
    assert result.counters.output_tokens == output


def test_configuration_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        CompletionGate()
    with pytest.raises(ConfigurationError):
        CompletionGate(mentions_paris, rubric_model="m", rubric="r")
    with pytest.raises(ConfigurationError):
        CompletionGate(rubric_model="m")
    with pytest.raises(ConfigurationError):
        CompletionGate(mentions_paris, max_attempts=0)


def test_reviewer_verdicts_are_parsed() -> None:
    from towline.capabilities.completion_gate import parse_verdict

    assert parse_verdict("PASS") is None
    assert parse_verdict("Verdict: pass. Nicely done.") is None
    assert parse_verdict("FAIL\nToo vague.") == "Too vague."
    assert parse_verdict("FAIL") == "The answer did not pass the completion check."
    assert parse_verdict("I cannot tell.") is None
