"""Issue 41, one home per fact: each fact is defined once and the others follow it.

The model call's defaults: a capability's own model call (here a summariser's) is scheduled
with the same retry policy as the run's model calls (`towline.options.model_retry_policy`);
before engine 5 a call naming no policy got only `maximum_attempts=5`, and its attempts
drifted up to 100 s apart instead of 30 s.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client

from scripts import Script, call, calls, text
from towline import Agent, tool
from towline.capabilities import Summarization
from towline.client import start_run
from towline.messages import Message, ModelResponse, TextPart, Usage
from towline.models import FunctionModel, ModelInfo
from towline.options import model_retry_policy
from towline.testing import history_events, towline_worker


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _summary(messages: list[Message], info: ModelInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content="SUMMARY")], usage=Usage(requests=1))


async def test_a_capability_model_call_retries_as_the_run_model_calls_do(client: Client) -> None:
    script = Script([
        calls(call("weather", {"city": "Oslo"}, "w1")),
        calls(call("weather", {"city": "Rome"}, "w2")),
        text("Both sunny."),
    ])
    agent = Agent(name="i41-retry", model=script.model, tools=[weather],
                  capabilities=[Summarization("i41-summ", trigger_messages=4, keep=1)])
    summariser = FunctionModel(_summary, model_name="i41-summ")
    async with towline_worker(client, [agent], models={"i41-summ": summariser}) as (tc, q):
        handle = await start_run(tc, agent, "weather in Oslo and Rome?", task_queue=q)
        await handle.result()
        events = await history_events(handle)

    scheduled = [e.activity_task_scheduled_event_attributes for e in events
                 if e.HasField("activity_task_scheduled_event_attributes")
                 and e.activity_task_scheduled_event_attributes.activity_type.name
                 == "towline.model_request"]
    assert len(scheduled) == 4  # three of the run's, one summary
    policies = {(a.retry_policy.maximum_attempts, a.retry_policy.maximum_interval.ToTimedelta())
                for a in scheduled}
    expected = model_retry_policy()
    assert policies == {(expected.maximum_attempts, expected.maximum_interval)}
    assert expected.maximum_interval == timedelta(seconds=30)


def test_the_ledger_record_and_the_counters_have_the_same_fields() -> None:
    """`ledger.proto` is the wire definition; `Counters` mirrors it field for field, and
    `to_proto` / `from_proto` follow both (a field added to one only fails here)."""
    from towline.results import Counters
    from towline.runtime.ledger import RECORD_FIELDS, RunCounters, from_proto, to_proto

    assert set(RECORD_FIELDS) == set(Counters.model_fields)
    full = Counters(tool_retries={"a": 2}, output_retries_used=1, run_step=3, tool_calls=4,
                    max_steps=5, output_retries=6, requests=7, input_tokens=8, output_tokens=9,
                    cost_micros=10, unpriced_requests=11, agent_version="v1")
    assert from_proto(to_proto(full)) == full
    assert to_proto(Counters()) == RunCounters(schema_version=Counters().schema_version)


def test_decision_kinds_have_one_definition() -> None:
    """Every decision kind has its audit word, and `serve` accepts exactly those kinds."""
    from typing import get_args

    from towline.serve.decide import DecisionBody
    from towline.serve.waits import ResumePayload
    from towline.workflows.decisions import DECIDED, DECISION_KINDS, DecisionKind

    assert DECISION_KINDS == get_args(DecisionKind) == ("approve", "reject", "edit", "respond")
    assert set(DECIDED) == set(DECISION_KINDS)
    body = DecisionBody.model_json_schema()["properties"]["decision"]["anyOf"][0]["enum"]
    assert tuple(body) == DECISION_KINDS
    assert tuple(ResumePayload.model_json_schema()["properties"]["decision"]["enum"]) == DECISION_KINDS


def test_event_types_are_the_enum_values() -> None:
    """`EVENT_TYPES` is derived from `EventType`, whose members are the strings on the wire."""
    import json

    from towline.events import EVENT_TYPES, EventType

    assert EVENT_TYPES == tuple(t.value for t in EventType)
    assert json.dumps({"type": EventType.TOOL_END}) == '{"type": "tool_end"}'
    assert EventType("client_tool") is EventType.CLIENT_TOOL


_NUMBERS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
            "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
            "twenty": 20}


def test_the_docs_count_the_built_in_capabilities_there_are() -> None:
    """Every "N built-in(s)" and "All N live in" in the README and docs is the number of
    capabilities `towline.capabilities` exports (its `Capability` / `Middleware` classes)."""
    import inspect
    import re
    from pathlib import Path

    from towline import capabilities
    from towline.capabilities import Capability, Middleware

    built_ins = [name for name in capabilities.__all__
                 if inspect.isclass(cls := getattr(capabilities, name))
                 and issubclass(cls, Capability | Middleware) and cls not in (Capability, Middleware)]
    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    said = [(page.name, word) for page in pages
            for word in re.findall(r"\b(\w+) built-ins?\b|\bAll (\w+) live in `towline\.capabilities`",
                                   page.read_text(encoding="utf-8"))
            for word in word if word.lower() in _NUMBERS]
    assert said, "the docs no longer say how many built-ins there are"
    assert [(page, word) for page, word in said if _NUMBERS[word.lower()] != len(built_ins)] == []
