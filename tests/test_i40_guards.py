"""Issue 40's guardrail items, in real runs on the dev server:

- a guard model's verdict is read strictly and fails closed (audit 3): "This message must not
  pass: ... FAIL" no longer passes `InputGuardrail`, `OutputGuardrail` or
  `PromptInjectionGuard`;
- guard requests are metered (audit 5): `cost_limit` and `request_limit` are checked before each
  guard request (`request_limit` counting the run's own requests and its guards'), so a batch of guarded tool results stops spending at the limit;
- a guardrail trip may end only the turn of a session (porting 5), and `towline send` (a real
  subprocess) reports the failure of a run that ended, naming the guardrail;
- a guard policy may say what to detect (porting 6), and the guard request has the documented
  shape.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from cli_helpers import assert_one_line_error, cli_env, towline, until_state
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from scripts import returns
from towline import Agent, Limits, ModelResponse, RunError, ToolCallPart, Usage, tool
from towline.capabilities import (
    InputGuardrail,
    OutputGuardrail,
    PromptInjectionGuard,
    ToolGuardrail,
)
from towline.capabilities._guardrail import read_verdict
from towline.client import run, run_error, start_run
from towline.errors import ConfigurationError
from towline.messages import Message, ModelRequest, SystemPart, TextPart, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker
from towline.workflows import SendInput

pytestmark = pytest.mark.timeout(90)

MUST_NOT_PASS = "This message must not pass: it asks for homework. FAIL"
"""A guard's reply whose verdict is not its first word (the old reader passed it)."""

asked: dict[str, list[tuple[str, str]]] = {}
"""Per guard model: (instructions, text) of every request it received."""


def _request(messages: list[Message]) -> tuple[str, str]:
    """A guard request's instructions (its system part) and text (its user part)."""
    system = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
              if isinstance(p, SystemPart)]
    user = [p.text for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPart)]
    return "\n".join(system), "\n".join(user)


def loose_guard(name: str) -> FunctionModel:
    """A guard that answers in prose whenever the text mentions homework."""

    def answer(messages: list[Message], info: ModelInfo) -> str:
        instructions, text = _request(messages)
        asked.setdefault(name, []).append((instructions, text))
        return MUST_NOT_PASS if "homework" in text.rsplit(":\n", 1)[-1] else "PASS"

    return FunctionModel(answer, model_name=name)


def echo(messages: list[Message], info: ModelInfo) -> str:
    """Answers with the last user text."""
    return f"you said: {_last_user(messages)}"


def _last_user(messages: list[Message]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            texts = [p.text for p in m.parts if isinstance(p, UserPart)]
            if texts:
                return texts[-1]
    return ""


# --- audit 3: verdicts that cannot be read fail closed -------------------------------------

loose_input = Agent(
    name="i40-loose-input", model=FunctionModel(echo, model_name="i40-echo"),
    capabilities=[InputGuardrail(model=loose_guard("i40-loose-in"), policy="No homework.",
                                 run_in_parallel=False, name="homework")])
loose_output = Agent(
    name="i40-loose-output", model=FunctionModel(echo, model_name="i40-echo-out"),
    capabilities=[OutputGuardrail(model=loose_guard("i40-loose-out"), policy="No homework.",
                                  name="homework-out")])


@tool
def fetch(url: str) -> str:
    """Fetch a page."""
    return f"page {url}: homework answers inside\nINJECTED: nothing"


def _fetch_then_answer(count: int) -> Any:
    """Fetches `count` pages at step 1, then answers with the statuses and contents."""

    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        done = returns(messages)
        if not done:
            return ModelResponse(parts=[
                ToolCallPart(tool_name="fetch", args={"url": f"https://p{i}.test"},
                             tool_call_id=f"f{i}") for i in range(count)])
        return " | ".join(f"{r.status}:{r.content}" for r in done)

    return answer


loose_injection = Agent(
    name="i40-loose-injection", model=FunctionModel(_fetch_then_answer(1), model_name="i40-fetcher"),
    tools=[fetch], capabilities=[PromptInjectionGuard(model=loose_guard("i40-loose-inject"))])


# --- audit 5: guard requests are metered ---------------------------------------------------

COSTLY = Usage(requests=1, input_tokens=10, output_tokens=2, cost=0.05)
guard_calls: dict[str, int] = {}


def costly_guard(name: str) -> FunctionModel:
    """A guard that passes everything, at $0.05 a request."""

    def answer(messages: list[Message], info: ModelInfo) -> str:
        guard_calls[name] = guard_calls.get(name, 0) + 1
        return "PASS"

    return FunctionModel(answer, model_name=name, usage=COSTLY)


cost_limited = Agent(
    name="i40-cost-limited",
    model=FunctionModel(_fetch_then_answer(20), model_name="i40-fetch20", usage=Usage()),
    tools=[fetch], limits=Limits(cost_limit=0.10),
    capabilities=[ToolGuardrail(model=costly_guard("i40-costly"), policy="No secrets.",
                                on="result", name="secrets")])
request_limited = Agent(
    name="i40-request-limited",
    model=FunctionModel(_fetch_then_answer(5), model_name="i40-fetch5"),
    tools=[fetch], limits=Limits(request_limit=3),
    capabilities=[PromptInjectionGuard(model=costly_guard("i40-counted"))])


# --- porting 5: a trip ends the turn of a session, or the run --------------------------------


def no_homework(text: str) -> str | None:
    return "asks for homework" if "homework" in text else None


def no_secret(answer: str) -> str | None:
    return "tells the secret" if "secret" in answer else None


surviving = Agent(
    name="i40-surviving", model=FunctionModel(echo, model_name="i40-echo-session"),
    capabilities=[
        InputGuardrail(check=no_homework, run_in_parallel=False, on_trip="end_turn",
                       refusal="Sorry, I can't help with homework."),
        OutputGuardrail(check=no_secret, on_trip="end_turn"),
    ])


async def slow_on_homework(messages: list[Message], info: ModelInfo) -> str:
    """Echoes; on homework, only after 30 s (cancelled long before: the guard trips first)."""
    if "homework" in _last_user(messages):
        await asyncio.sleep(30)
    return echo(messages, info)


def homework_guard(name: str) -> FunctionModel:
    """A guard in the strict form: FAIL (and why) on homework, after 0.3 s; else PASS."""

    async def answer(messages: list[Message], info: ModelInfo) -> str:
        await asyncio.sleep(0.3)
        judged = _request(messages)[1].rsplit(":\n", 1)[-1]  # after the policy
        return "FAIL\nIt asks for homework." if "homework" in judged else "PASS"

    return FunctionModel(answer, model_name=name)


surviving_parallel = Agent(
    name="i40-surviving-parallel", model=FunctionModel(slow_on_homework, model_name="i40-slow"),
    model_heartbeat_timeout=timedelta(seconds=1),  # the cancellation reaches the worker fast
    capabilities=[InputGuardrail(model=homework_guard("i40-parallel-guard"), policy="No homework.",
                                 name="homework", on_trip="end_turn")])
ending = Agent(
    name="i40-ending", model=FunctionModel(echo, model_name="i40-echo-ending"),
    capabilities=[InputGuardrail(check=no_homework, run_in_parallel=False)])


# --- porting 6: a policy of what to detect ---------------------------------------------------


def literal_guard(name: str) -> FunctionModel:
    """A stand-in for an LLM that follows the instructions literally: under "detect", FAIL when
    the text mentions the topic the description names; under "allow", PASS only when the text
    keeps to the policy's topic (so a detection written as a policy flags everything else)."""

    def answer(messages: list[Message], info: ModelInfo) -> str:
        instructions, text = _request(messages)
        asked.setdefault(name, []).append((instructions, text))
        head, _, shown = text.partition("\n\n")
        topic = "homework" if "homework" in head else "?"
        about = topic in shown.split(":\n", 1)[-1]
        if head.startswith("Detect:\n"):
            return "FAIL\nIt asks for homework." if about else "PASS"
        return "PASS" if about else "FAIL\nIt is not about homework."

    return FunctionModel(answer, model_name=name)


HOMEWORK = "The user asks for help with their maths homework."
detecting = Agent(
    name="i40-detecting", model=FunctionModel(echo, model_name="i40-echo-detect"),
    capabilities=[InputGuardrail(model=literal_guard("i40-detector"), policy=HOMEWORK,
                                 policy_kind="detect", run_in_parallel=False, name="homework")])

AGENTS = [loose_input, loose_output, loose_injection, cost_limited, request_limited, surviving,
          surviving_parallel, ending, detecting]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for the module's agents."""
    async with towline_worker(client, AGENTS) as served:
        yield served


async def _failed(tc: Client, queue: str, agent: Agent, prompt: str) -> RunError:
    with pytest.raises(RunError) as caught:
        await run(tc, agent, prompt, task_queue=queue)
    return caught.value


async def _model_requests(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The summaries of the run's `towline.model_request` activities, in order."""
    return [e.user_metadata.summary.data.decode() for e in
            [e async for e in handle.fetch_history_events()]
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name
            == "towline.model_request"]


# --- audit 3 -------------------------------------------------------------------------------


async def test_a_prose_verdict_trips_the_input_guardrail_and_says_why(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    err = await _failed(tc, queue, loose_input, "do my homework")
    assert err.reason == "GuardrailTripped"
    assert err.message.startswith(
        "guardrail 'homework' tripped on the input: the guard model's verdict could not be read "
        "(a reply must start with PASS or FAIL")
    assert MUST_NOT_PASS in err.message  # what it answered, for whoever reads the failure
    ok = await run(tc, loose_input, "what is the weather", task_queue=queue)
    assert ok.output == "you said: what is the weather"


async def test_a_prose_verdict_trips_the_output_guardrail(served: tuple[Client, str]) -> None:
    tc, queue = served
    err = await _failed(tc, queue, loose_output, "homework")
    assert err.reason == "GuardrailTripped"
    assert "guardrail 'homework-out' tripped on the output: the guard model's verdict could not " \
           "be read" in err.message


async def test_a_prose_verdict_withholds_a_tool_result_from_the_model(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    result = await run(tc, loose_injection, "fetch it", task_queue=queue)
    (ret,) = returns(result.messages)
    assert ret.status == "denied"  # withheld whole: an unread verdict quotes nothing to redact
    assert "homework answers" not in str(ret.content)
    assert "the guard model's verdict could not be read" in str(ret.content)


def test_the_verdict_forms_that_are_read() -> None:
    assert read_verdict("PASS") == (True, "")
    assert read_verdict("FAIL\nIt asks for homework.") == (False, "It asks for homework.")
    assert read_verdict("**FAIL**: off topic") == (False, "off topic")
    assert read_verdict('```json\n{"verdict": "fail", "reason": "homework"}\n```') == (
        False, "homework")
    assert read_verdict('{"verdict": "PASS"}') == (True, "")
    for unread in (MUST_NOT_PASS, "pass", "Verdict: PASS", "PASS, though it should FAIL",
                   '{"verdict": "maybe"}', "", "PASSED"):
        assert read_verdict(unread) is None, unread


# --- audit 5 -------------------------------------------------------------------------------


async def test_guarded_tool_results_stop_spending_at_the_cost_limit(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    guard_calls.pop("i40-costly", None)
    handle = await start_run(tc, cost_limited, "fetch twenty pages", task_queue=queue)
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    err = run_error(caught.value)
    assert guard_calls["i40-costly"] == 3
    assert err.reason == "UsageLimitExceeded"
    assert err.message == "cost_limit $0.1 exceeded ($0.150000 spent)"
    assert err.partial is not None
    c = err.partial.counters
    # three guard requests (the third passed the limit), not twenty: each paid for and in the
    # run's usage; the ledger's `requests` stays the run's own (request n's header says n - 1)
    assert (c.cost_micros, c.requests) == (150_000, 1)
    assert err.partial.usage.requests == 3  # the guards' (the run's own model reports none)
    summaries = await _model_requests(handle)
    assert len(summaries) == 1 + 3
    assert all("guardrail secrets" in s for s in summaries[1:])


async def test_guard_requests_count_against_the_request_limit(served: tuple[Client, str]) -> None:
    tc, queue = served
    guard_calls.pop("i40-counted", None)
    handle = await start_run(tc, request_limited, "fetch five pages", task_queue=queue)
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    assert guard_calls["i40-counted"] == 2  # the run's request, then two guards: three in all
    assert len(await _model_requests(handle)) == 3
    err = run_error(caught.value)
    assert err.reason == "UsageLimitExceeded"
    assert err.message == ("request_limit 3 reached: no request is left for guardrail "
                           "'PromptInjectionGuard'")
    assert err.partial is not None and err.partial.counters.requests == 1  # the run's own


# --- porting 5 -----------------------------------------------------------------------------


async def _waiting(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the session waits for its next message."""
    await until_state(handle, lambda state: state["status"] == "waiting"
                      and state["waiting_for"] == "message")


async def test_a_session_survives_a_trip_that_ends_the_turn(
    served: tuple[Client, str], target: str, namespace: str,
) -> None:
    tc, queue = served
    env = cli_env(target, namespace)
    handle = await start_run(tc, surviving, "hello", task_queue=queue, session=True,
                             id=f"i40-survive-{uuid.uuid4().hex[:8]}")
    await _waiting(handle)
    refused = await towline("send", handle.id, "do my homework", env=env)
    assert (refused.code, refused.out) == (0, "Sorry, I can't help with homework.\n"), refused
    stopped = await towline("send", handle.id, "tell me the secret", env=env)
    assert (stopped.code, stopped.out) == (0, "Sorry, I can't help with that.\n"), stopped
    answered = await towline("send", handle.id, "what is 2 plus 2", env=env)
    assert (answered.code, answered.out) == (0, "you said: what is 2 plus 2\n"), answered
    await handle.signal("end")
    result = await handle.result()
    said = [(m.kind, p.content) for m in result.messages for p in m.parts
            if isinstance(p, UserPart | TextPart)]
    # the refusals are the turns' answers; the answer the output guardrail stopped is gone
    assert said == [
        ("request", "hello"), ("response", "you said: hello"),
        ("request", "do my homework"), ("response", "Sorry, I can't help with homework."),
        ("request", "tell me the secret"), ("response", "Sorry, I can't help with that."),
        ("request", "what is 2 plus 2"), ("response", "you said: what is 2 plus 2")]
    assert result.output == "you said: what is 2 plus 2"
    # outside a session there is no next message: the trip ends the run, as by default
    err = await _failed(tc, queue, surviving, "do my homework")
    assert err.reason == "GuardrailTripped"
    assert err.message == "guardrail 'no_homework' tripped on the input: asks for homework"


async def test_a_parallel_guard_that_ends_the_turn_cancels_the_request_and_the_session_goes_on(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    handle = await start_run(tc, surviving_parallel, "hello", task_queue=queue, session=True)
    await _waiting(handle)
    refused = await handle.execute_update("send", SendInput(content="do my homework"))
    assert refused == "Sorry, I can't help with that."
    answered = await handle.execute_update("send", SendInput(content="what is 2 plus 2"))
    assert answered == "you said: what is 2 plus 2"
    await handle.signal("end")
    result = await handle.result()
    kinds = [e.event_type async for e in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED in kinds  # the homework turn's request
    assert [m.parts[0].content for m in result.messages] == [  # type: ignore[union-attr]
        "hello", "you said: hello", "do my homework", "Sorry, I can't help with that.",
        "what is 2 plus 2", "you said: what is 2 plus 2"]
    # three turns; each asked the guard, and the two answered turns the model (the ledger's
    # `requests` counts the run's own, its usage the guards' too)
    assert (result.counters.run_step, result.counters.requests) == (3, 2)


async def test_send_reports_the_guardrail_that_ended_the_run(
    served: tuple[Client, str], target: str, namespace: str,
) -> None:
    tc, queue = served
    env = cli_env(target, namespace)
    handle = await start_run(tc, ending, "hello", task_queue=queue, session=True,
                             id=f"i40-ending-{uuid.uuid4().hex[:8]}")
    await _waiting(handle)
    why = ("It failed: GuardrailTripped: guardrail 'no_homework' tripped on the input: asks for "
           "homework")
    tripped = await towline("send", handle.id, "do my homework", env=env)  # ends it meanwhile
    assert_one_line_error(tripped, 1, f"run {handle.id!r} has ended (FAILED)", why)
    after = await towline("send", handle.id, "still there?", env=env)  # it had ended before
    assert_one_line_error(after, 1, f"run {handle.id!r} has ended (FAILED)", why)


# --- porting 6 -----------------------------------------------------------------------------


async def test_a_policy_of_what_to_detect_passes_other_questions(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    asked.pop("i40-detector", None)
    ok = await run(tc, detecting, "What's the capital of California?", task_queue=queue)
    assert ok.output == "you said: What's the capital of California?"
    err = await _failed(tc, queue, detecting, "Can you do my maths homework?")
    assert err.message == "guardrail 'homework' tripped on the input: It asks for homework."
    # the request's exact shape, as docs/guardrails.md shows it
    instructions, text = asked["i40-detector"][0]
    assert instructions == (
        "You are a guardrail. You are shown a message a user sent to an AI assistant and a "
        "description of what to detect. Reply FAIL on the first line if it matches the "
        "description, followed by one short sentence saying what you detected. Otherwise reply "
        "PASS on the first line.")
    assert text == (f"Detect:\n{HOMEWORK}\n\nA message a user sent to an AI assistant:\n"
                    "What's the capital of California?")


def test_the_new_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="policy_kind must be 'allow' or 'detect'"):
        InputGuardrail(model="m", policy="p", policy_kind="deny")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="on_trip must be 'end_run' or 'end_turn'"):
        OutputGuardrail(check=no_secret, on_trip="end_session")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="refusal must not be empty"):
        InputGuardrail(check=no_homework, on_trip="end_turn", refusal="")
