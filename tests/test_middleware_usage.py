"""`llm_usage`: hooks' model usage is summed with the turn's and shown in the ledger.

Usage-bearing hooks (a summariser, a critic) call models durably through
`towline.workflows.call_model` (one `towline.model_request` activity each) and
report the usage under `llm_usage`; it counts against token limits like the
run's own model usage.
"""

from __future__ import annotations

from typing import Any

from mw_helpers import Recorder, activity_types, fail_agent, ledger, run_agent, texts_of, user
from temporalio.client import Client

from towline import Agent, Limits, Middleware, RemoveAll, Usage
from towline.workflows import call_model

MODEL_USAGE = Usage(requests=1, input_tokens=10, output_tokens=5)


def _reporting(name: str, hook: str, usage: Any) -> Middleware:
    def report(state: dict[str, Any]) -> dict[str, Any]:
        return {"llm_usage": usage}

    if hook == "before_model":
        return Middleware(name, before_model=report)
    return Middleware(name, after_model=report)


async def test_two_hooks_llm_usage_is_added_to_the_ledger(client: Client) -> None:
    model = Recorder.script("mw-usage-two-model", "answer")
    agent = Agent(name="mw-usage-two", model=model.model(usage=MODEL_USAGE), capabilities=[
        _reporting("critic", "after_model", {"input_tokens": 7, "output_tokens": 3}),
        _reporting("summariser", "before_model", Usage(input_tokens=100, output_tokens=20)),
    ])
    result, events = await run_agent(client, agent)

    assert result.output == "answer"
    expected_in, expected_out = 10 + 100 + 7, 5 + 20 + 3
    recorded = ledger(events)
    assert (recorded.input_tokens, recorded.output_tokens) == (expected_in, expected_out)
    assert (result.counters.input_tokens, result.counters.output_tokens) == (
        expected_in, expected_out)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (expected_in, expected_out)
    assert recorded.requests == 1  # hooks' usage adds tokens, not the run's model requests


async def test_hook_usage_counts_against_the_token_limit(client: Client) -> None:
    model = Recorder.script("mw-usage-limit-model", "answer")
    agent = Agent(name="mw-usage-limit", model=model.model(usage=MODEL_USAGE), capabilities=[
        _reporting("expensive", "after_model", Usage(input_tokens=200, output_tokens=0)),
    ])
    err = await fail_agent(client, agent, limits=Limits(total_tokens_limit=100))

    assert err.reason == "UsageLimitExceeded"
    assert err.partial is not None
    assert err.partial.counters.total_tokens == 15 + 200


async def test_summariser_hook_calls_a_model_durably_and_reports_usage(client: Client) -> None:
    summariser = Recorder.script("mw-usage-summariser", "a short summary")

    async def summarise(state: dict[str, Any]) -> dict[str, Any] | None:
        if state["summarised"]:
            return None
        response = await call_model(
            "mw-usage-summariser", [user(f"Summarise: {texts_of(state['messages'])}")],
            agent="mw-usage-summary", summary="summarise history",
        )
        return {
            "messages": [RemoveAll(), user(response.text)],
            "llm_usage": response.usage,
            "summarised": True,
        }

    model = Recorder.script("mw-usage-summary-model", "final answer")
    agent = Agent(name="mw-usage-summary", model=model.model(usage=MODEL_USAGE), capabilities=[
        Middleware("summariser", before_model=summarise, state_schema={"summarised": False}),
    ])
    result, events = await run_agent(client, agent, "a long prompt", models={
        "mw-usage-summariser": summariser.model(
            usage=Usage(requests=1, input_tokens=50, output_tokens=20)),
    })

    assert result.output == "final answer"
    # the summariser's call is an activity of its own, before the run's model request
    assert activity_types(events) == ["towline.model_request"] * 2
    assert texts_of(summariser.seen[0].messages) == ["Summarise: ['a long prompt']"]
    assert texts_of(model.seen[0].messages) == ["a short summary"]
    recorded = ledger(events)
    assert (recorded.input_tokens, recorded.output_tokens) == (10 + 50, 5 + 20)
    assert result.counters == recorded
    assert texts_of(result.messages) == ["a short summary", "final answer"]
