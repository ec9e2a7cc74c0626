"""Structured output: `output_type` a pydantic model, validated, with output retries.

The model is offered a `final_result` output tool with the type's schema; a valid
call ends the run with the validated value; an invalid one is answered with a
`validation_error` return and consumes an output retry; past `output_retries` the
run fails with `OutputRetriesExhausted`, carrying the partial run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel, Field
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import Agent, Limits, Middleware, ModelResponse, RetryPart
from towline.client import run
from towline.errors import RunError
from towline.testing import towline_worker


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    celsius: int = Field(ge=-90, le=60)


def _out(args: dict[str, object], call_id: str) -> ModelResponse:
    return calls(call("final_result", args, call_id, kind="output"))


VALID = Script([_out({"city": "Oslo", "celsius": 4}, "v1")])
RETRIED = Script([
    _out({"city": "Oslo", "celsius": "cold"}, "r1"),
    _out({"city": "Oslo", "celsius": 4}, "r2"),
])
EXHAUSTED = Script([
    _out({"city": "Oslo"}, "x1"),
    _out({"city": "Oslo", "celsius": 999}, "x2"),
    _out({"city": "Oslo", "celsius": 4}, "x3"),
])
TEXT_JSON = Script([
    "it is cold",
    json.dumps({"city": "Oslo", "celsius": 4}),
])

VALID_AGENT = Agent(name="output-valid", model=VALID.model, output_type=Weather)
RETRIED_AGENT = Agent(name="output-retried", model=RETRIED.model, output_type=Weather)
EXHAUSTED_AGENT = Agent(name="output-exhausted", model=EXHAUSTED.model, output_type=Weather,
                        limits=Limits(output_retries=1))
TEXT_AGENT = Agent(name="output-text-json", model=TEXT_JSON.model, output_type=Weather)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    agents = [VALID_AGENT, RETRIED_AGENT, EXHAUSTED_AGENT, TEXT_AGENT]
    async with towline_worker(client, agents) as pair:
        yield pair


async def test_valid_output_is_the_validated_value(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, VALID_AGENT, "weather in Oslo?", task_queue=queue)
    # `run` was given the Agent: the output is validated into its output_type on the client
    assert result.output == Weather(city="Oslo", celsius=4)
    (seen,) = VALID.seen
    (offered,) = seen.info.output_tools
    assert offered.name == "final_result" and offered.kind == "output"
    assert offered.parameters_json_schema["required"] == ["city", "celsius"]
    assert seen.info.tools == []
    assert [r.status for r in returns(result.messages)] == ["succeeded"]
    assert result.counters.output_retries_used == 0
    assert_paired(result)


async def test_invalid_output_is_retried(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, RETRIED_AGENT, "weather in Oslo?", task_queue=queue)
    assert result.output == Weather(city="Oslo", celsius=4)
    statuses = {r.tool_call_id: r.status for r in returns(result.messages)}
    assert statuses == {"r1": "validation_error", "r2": "succeeded"}
    assert result.counters.output_retries_used == 1
    # The model saw why its first answer was rejected.
    second = RETRIED.seen[1].messages
    (rejected,) = returns(second)
    assert rejected.status == "validation_error" and "celsius" in str(rejected.content)
    assert_paired(result)


async def test_output_retries_exhausted(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    with pytest.raises(RunError) as info:
        await run(tclient, EXHAUSTED_AGENT, "weather in Oslo?", task_queue=queue)
    err = info.value
    assert err.reason == "OutputRetriesExhausted"
    partial = err.partial
    assert partial is not None
    assert [s.run_step for s in EXHAUSTED.seen] == [1, 2]
    assert partial.request_count == 2
    assert partial.counters.output_retries_used == 2
    assert [r.status for r in returns(partial.messages)] == ["validation_error"] * 2
    assert_paired(partial)


async def test_text_answer_is_validated_too(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    result = await run(tclient, TEXT_AGENT, "weather in Oslo?", task_queue=queue)
    assert result.output == Weather(city="Oslo", celsius=4)
    assert result.counters.output_retries_used == 1
    retries = [p for m in result.messages if m.kind == "request"
               for p in m.parts if isinstance(p, RetryPart)]
    assert len(retries) == 1 and "final_result" in retries[0].content


class Verdict(BaseModel):
    """A structured answer."""

    ok: bool


def _ender(state: dict[str, Any]) -> dict[str, Any]:
    return {"jump_to": "end"}


@pytest.mark.parametrize(("answer", "expected"), [('{"ok": true}', Verdict(ok=True)), ("not json", None)])
async def test_an_end_jump_gives_validated_output_or_none(
    client: Client, answer: str, expected: Any
) -> None:
    script = Script([text(answer)])
    agent = Agent(name=f"structured-end-{expected is None}", model=script.model,
                  output_type=Verdict, capabilities=[Middleware("ender", after_model=_ender)])
    async with towline_worker(client, [agent]) as (tclient, queue):
        result = await run(tclient, agent, "judge", task_queue=queue)
    assert result.output == expected
    assert result.counters.output_retries_used == 0
