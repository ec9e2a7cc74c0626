"""Issue 41, a typed client (item 3), in real runs on the dev server:

- `towline.client.run` raises a failed run's error as the failure's own class
  (`MaxStepsExceeded`, `UsageLimitExceeded`, `GuardrailTripped`), which is also a `RunError`
  with `.reason`, `.message` and `.partial` as before; a reason towline does not define stays
  a plain `RunError`; `towline.client.send`'s `RunEnded` is unchanged;
- the `state` query's `status` is a `RunStatus`, written exactly as before (the
  `TowlineStatus` search attribute still reads `waiting`).
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowFailureError

from scripts import Script, call, calls, text
from towline import (
    Agent,
    GuardrailTripped,
    Limits,
    MaxStepsExceeded,
    RunEnded,
    RunError,
    RunFailure,
    RunStatus,
    UsageLimitExceeded,
    tool,
)
from towline.capabilities import InputGuardrail
from towline.client import run, run_error, send, start_run
from towline.contract import StateQueryResult
from towline.errors import failed_run
from towline.runtime.search_attributes import STATUS
from towline.testing import towline_worker

pytestmark = pytest.mark.timeout(90)


@tool
def echo(word: str) -> str:
    """Echo a word."""
    return word


def no_homework(text: str) -> str | None:
    return "asks for homework" if "homework" in text else None


steps = Agent(name="i41-err-steps",
              model=Script([calls(call("echo", {"word": "a"}, "s1")), text("never")]).model,
              tools=[echo], limits=Limits(max_steps=1))
calls_limit = Agent(name="i41-err-calls",
                    model=Script([calls(call("echo", {"word": "a"}, "u1"),
                                        call("echo", {"word": "b"}, "u2")),
                                  text("never")]).model,
                    tools=[echo], limits=Limits(tool_calls_limit=1))
guarded = Agent(name="i41-err-guarded", model=Script([text("hi")] * 20).model,
                capabilities=[InputGuardrail(check=no_homework, run_in_parallel=False)])

AGENTS = [steps, calls_limit, guarded]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, AGENTS) as served:
        yield served


async def test_max_steps_is_raised_as_its_class_and_as_a_run_error(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    with pytest.raises(MaxStepsExceeded) as caught:
        await run(tc, steps, "go", task_queue=queue)
    e = caught.value
    assert isinstance(e, RunError) and isinstance(e, RunFailure)
    assert e.reason == "MaxStepsExceeded"
    assert "max_steps" in e.message and str(e) == f"MaxStepsExceeded: {e.message}"
    assert e.partial is not None and e.partial.counters.run_step == 1
    assert not isinstance(e, UsageLimitExceeded | GuardrailTripped)
    # `except RunError` still catches it, with the same fields
    try:
        await run(tc, steps, "go", task_queue=queue)
    except RunError as again:
        assert again.reason == "MaxStepsExceeded" and again.partial is not None
    else:
        raise AssertionError("the run did not fail")


async def test_usage_limit_and_guardrail_are_raised_as_their_classes(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    with pytest.raises(UsageLimitExceeded) as limit:
        await run(tc, calls_limit, "go", task_queue=queue)
    assert isinstance(limit.value, RunError) and limit.value.reason == "UsageLimitExceeded"
    assert limit.value.partial is not None

    with pytest.raises(GuardrailTripped) as tripped:
        await run(tc, guarded, "do my homework", task_queue=queue)
    e = tripped.value
    assert isinstance(e, RunError) and e.reason == "GuardrailTripped"
    assert "no_homework" in e.message and e.partial is not None
    assert any("homework" in str(m) for m in e.partial.messages)
    # it survives pickling (a process pool, a task queue of the caller's own)
    copy = pickle.loads(pickle.dumps(e))
    assert isinstance(copy, GuardrailTripped) and isinstance(copy, RunError)
    assert (copy.reason, copy.message) == (e.reason, e.message)


async def test_a_reason_towline_does_not_define_stays_a_plain_run_error(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    handle = await start_run(tc, guarded, "hello", task_queue=queue, session=True,
                             id=f"i41-err-term-{uuid.uuid4().hex[:8]}")
    await handle.terminate("by the test")
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    err = run_error(failure.value)
    assert type(err) is RunError and err.reason == "TerminatedError"
    own = failed_run("MyOwnFailure", "a type of the user's own", None)
    assert type(own) is RunError and own.reason == "MyOwnFailure"


async def test_send_still_raises_run_ended(served: tuple[Client, str]) -> None:
    tc, queue = served
    handle = await start_run(tc, guarded, "hello", task_queue=queue, session=True,
                             id=f"i41-err-send-{uuid.uuid4().hex[:8]}")
    assert await send(handle, "are you there") == "hi"
    with pytest.raises(RunEnded) as caught:
        await send(handle, "do my homework")
    e = caught.value
    assert isinstance(e, RunError) and type(e) is RunEnded
    assert (e.status, e.reason) == ("FAILED", "GuardrailTripped")
    assert "no_homework" in e.message and e.partial is not None


async def test_the_state_query_status_is_a_run_status(served: tuple[Client, str]) -> None:
    tc, queue = served
    handle = await start_run(tc, guarded, "hello", task_queue=queue, session=True,
                             id=f"i41-err-state-{uuid.uuid4().hex[:8]}")
    assert await send(handle, "are you there") == "hi"
    raw: dict[str, Any] = await handle.query("state")
    assert raw["status"] == "waiting"  # the wire value is unchanged
    state = StateQueryResult.model_validate(raw)
    assert state.status is RunStatus.WAITING and state.waiting_for == "message"
    described = await handle.describe()
    assert described.typed_search_attributes.get(STATUS) == "waiting"
    await handle.terminate("done")
