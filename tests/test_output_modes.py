"""Structured output without an output tool: `output_mode="native"` and `"prompted"`.

In both modes the model answers with JSON text. Native mode hands the provider the
output's schema (`ModelInfo.output_schema`, no output tool); prompted mode writes the
schema into the instructions and reads the JSON out of the text (a code fence, prose
around it). Invalid output is answered with a `RetryPart` saying what was wrong and
counts towards `output_retries`, as in the tool mode.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowFailureError

from scripts import Script, assert_paired, call, calls, returns
from towline import Agent, Limits, Middleware, ModelResponse, RetryPart, tool
from towline.capabilities.state import ModelCallRequest
from towline.client import run, run_error, start_run
from towline.errors import ConfigurationError
from towline.messages import ModelRequest, SystemPart, TextPart
from towline.models import ModelInfo, TestModel
from towline.runtime.fingerprint import agent_version, describe_agent
from towline.runtime.ledger import counters_from_history
from towline.testing import towline_worker
from towline.workflows.output import PROMPTED_OUTPUT


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    celsius: int = Field(ge=-90, le=60)
    unit: str = "C"


@tool
def thermometer(city: str) -> int:
    """The temperature in `city`."""
    return 4


def _json(**value: Any) -> str:
    return json.dumps(value)


# native: a tool call first, then JSON whose optional field is null (strict schemas ask for it)
NATIVE = Script([
    calls(call("thermometer", {"city": "Oslo"})),
    _json(city="Oslo", celsius=4, unit=None),
])
# prompted: the JSON in a fenced block, with prose around it
PROMPTED = Script(["Here it is:\n```json\n" + _json(city="Oslo", celsius=4) + "\n```\nEnjoy."])
# invalid JSON, then the object with prose around it
RETRIED = Script(["It is cold in Oslo.", 'Sure: {"city": "Oslo", "celsius": 4} as asked'])
# not JSON, then out of range: past output_retries=1
EXHAUSTED = Script(["cold", _json(city="Oslo", celsius=999), _json(city="Oslo", celsius=4)])
# a non-object output type is wrapped as {"response": ...}; its $defs stay resolvable
WRAPPED = Script([_json(response=[{"city": "Oslo", "celsius": 4, "unit": None}])])

seen_by_wrapper: list[list[str]] = []


async def _record_system(request: ModelCallRequest, next: Any) -> ModelResponse:
    seen_by_wrapper.append([p.content for m in request.messages if isinstance(m, ModelRequest)
                            for p in m.parts if isinstance(p, SystemPart)])
    response: ModelResponse = await next(request)
    return response


NATIVE_AGENT = Agent(name="mode-native", model=NATIVE.model, output_type=Weather,
                     output_mode="native", tools=[thermometer], instructions="Be exact.")
PROMPTED_AGENT = Agent(name="mode-prompted", model=PROMPTED.model, output_type=Weather,
                       output_mode="prompted", instructions="Be exact.",
                       capabilities=[Middleware("record", wrap_model_call=_record_system)])
RETRIED_AGENT = Agent(name="mode-retried", model=RETRIED.model, output_type=Weather,
                      output_mode="prompted")
EXHAUSTED_AGENT = Agent(name="mode-exhausted", model=EXHAUSTED.model, output_type=Weather,
                        output_mode="native", limits=Limits(output_retries=1))
WRAPPED_AGENT = Agent(name="mode-wrapped", model=WRAPPED.model, output_type=list[Weather],
                      output_mode="native")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    agents = [NATIVE_AGENT, PROMPTED_AGENT, RETRIED_AGENT, EXHAUSTED_AGENT, WRAPPED_AGENT]
    async with towline_worker(client, agents) as pair:
        yield pair


def _system_texts(messages: list[Any]) -> list[str]:
    return [p.content for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, SystemPart)]


async def test_native_output_after_a_tool_call(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, NATIVE_AGENT, "weather in Oslo?", task_queue=queue)
    # the null the strict schema allowed stands for "not given": the default applies
    assert result.output == Weather(city="Oslo", celsius=4, unit="C")
    assert [r.content for r in returns(result.messages)] == [4]  # the tool ran first
    first, second = NATIVE.seen
    for seen in (first, second):
        assert seen.info.output_mode == "native"
        assert seen.info.output_schema == NATIVE_AGENT.output_schema()
        assert seen.info.output_tools == []
        assert [t.name for t in seen.info.tools] == ["thermometer"]
        assert _system_texts(seen.messages) == ["Be exact."]  # no schema in the instructions
    assert result.counters.output_retries_used == 0
    assert_paired(result)


async def test_prompted_output_from_a_fenced_block(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    seen_by_wrapper.clear()
    result = await run(tclient, PROMPTED_AGENT, "weather in Oslo?", task_queue=queue)
    assert result.output == Weather(city="Oslo", celsius=4)
    (seen,) = PROMPTED.seen
    assert seen.info.output_mode == "prompted" and seen.info.output_tools == []
    schema = PROMPTED_AGENT.output_schema()
    prompt = PROMPTED_OUTPUT.format(schema=json.dumps(schema, separators=(",", ":")))
    # after the agent's instructions, in the same message; hooks see what the model sees
    assert _system_texts(seen.messages) == ["Be exact.", prompt]
    assert seen_by_wrapper == [["Be exact.", prompt]]
    assert '"celsius"' in prompt and '"maximum":60' in prompt
    assert not any(isinstance(m, ModelRequest) and any(isinstance(p, SystemPart) for p in m.parts)
                   for m in result.messages)  # instructions are sent, never stored


async def test_invalid_output_is_retried_with_what_was_wrong(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, RETRIED_AGENT, "weather in Oslo?", task_queue=queue)
    assert result.output == Weather(city="Oslo", celsius=4)
    assert result.counters.output_retries_used == 1
    retry = RETRIED.seen[1].messages[-1]
    assert isinstance(retry, ModelRequest)
    (part,) = retry.parts
    assert isinstance(part, RetryPart)
    assert "not valid JSON" in part.content and "final_result" not in part.content


async def test_output_retries_exhausted_counts_in_the_ledger(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    handle = await start_run(tclient, EXHAUSTED_AGENT, "weather in Oslo?", task_queue=queue)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    err = run_error(info.value)
    assert err.reason == "OutputRetriesExhausted"
    assert err.partial is not None and err.partial.counters.output_retries_used == 2
    assert [s.run_step for s in EXHAUSTED.seen] == [1, 2]
    retries = [p.content for m in err.partial.messages if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, RetryPart)]
    assert len(retries) == 2 and "less than or equal to 60" in retries[1]
    ledger = counters_from_history((await handle.fetch_history()).events)
    assert ledger[-1].output_retries_used == 2 and ledger[-1].output_retries == 1


async def test_a_wrapped_output_type(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, WRAPPED_AGENT, "weather in Oslo?", task_queue=queue)
    assert result.output == [Weather(city="Oslo", celsius=4)]
    (seen,) = WRAPPED.seen
    schema = seen.info.output_schema
    assert schema is not None and schema["required"] == ["response"]
    assert schema["properties"]["response"]["items"] == {"$ref": "#/$defs/Weather"}
    assert "Weather" in schema["$defs"]  # the root holds the definitions a $ref names


@pytest.mark.parametrize("answer", ['```\n{"ok": true}\n```', "no JSON here"])
async def test_an_end_jump_reads_prompted_output(client: Client, answer: str) -> None:
    class Verdict(BaseModel):
        ok: bool

    script = Script([answer])
    agent = Agent(name=f"mode-jump-{len(answer)}", model=script.model, output_type=Verdict,
                  output_mode="prompted",
                  capabilities=[Middleware("ender", after_model=lambda s: {"jump_to": "end"})])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "judge", task_queue=queue)
    assert result.output == (Verdict(ok=True) if "{" in answer else None)
    assert result.counters.output_retries_used == 0


async def test_test_model_answers_with_json_matching_the_schema() -> None:
    agent = Agent(name="mode-test-model", output_type=Weather, output_mode="native")
    info = ModelInfo(output_mode="native", output_schema=agent.output_schema())
    response = await TestModel().request([ModelRequest(parts=[])], info)
    (part,) = response.parts
    assert isinstance(part, TextPart)
    assert Weather.model_validate_json(part.content) == Weather(city="a", celsius=1)


def test_output_mode_is_part_of_the_version_only_when_not_tool() -> None:
    tool_mode = Agent(name="versioned", output_type=Weather)
    native = Agent(name="versioned", output_type=Weather, output_mode="native")
    assert "output_mode" not in describe_agent(tool_mode)  # existing agents keep their version
    assert describe_agent(native)["output_mode"] == "native"
    assert agent_version(tool_mode) != agent_version(native)
    with pytest.raises(ConfigurationError, match="structured output_type"):
        Agent(name="text-native", output_mode="native")
