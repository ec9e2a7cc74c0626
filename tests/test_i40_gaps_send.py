"""Issue 40, porting 5 (what the CLI fix left): a `send` in flight when the run ends, and a
`send` to a run that has ended, say why through every client, in real runs on the dev server.

- the `send` update itself finishes when the run fails (engine 5): it fails with the run's
  reason as its type (`GuardrailTripped`) and the run's message (naming the guardrail), and
  the worker no longer leaves it unfinished (`UnfinishedUpdateHandlersWarning`; the sender
  got only "the Workflow completed before the Update completed");
- `towline.client.send` raises `RunEnded` with the run's status, reason, message and partial
  run, whether the run ended while the message waited or before it was sent;
- `towline serve` reports a message that ended the session as `RUN_ERROR` with the reason as
  its code and the guardrail's words, not Temporal's.
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.workflow import UnfinishedUpdateHandlersWarning

from towline import Agent, RunEnded
from towline.capabilities import InputGuardrail
from towline.client import send, start_run
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.serve.app import ServeConfig, create_app
from towline.serve.streaming import thread_workflow_id
from towline.testing import towline_worker
from towline.workflows import SendInput

pytestmark = pytest.mark.timeout(90)

TRIPPED = "guardrail 'no_homework' tripped on the input: asks for homework"
"""The run's failure message: it names the guardrail and what it said."""


def echo(messages: list[Message], info: ModelInfo) -> str:
    said = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPart)]
    return f"you said: {said[-1]}"


def no_homework(text: str) -> str | None:
    return "asks for homework" if "homework" in text else None


# the default on_trip: a trip ends the whole session
ending = Agent(name="i40-gaps-send-ending", model=FunctionModel(echo, model_name="i40-gaps-echo"),
               capabilities=[InputGuardrail(check=no_homework, run_in_parallel=False)])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, [ending]) as served:
        yield served


async def _session(tc: Client, queue: str) -> WorkflowHandle[Any, Any]:
    """A live session that has answered a message and waits for the next one."""
    handle = await start_run(tc, ending, "hello", task_queue=queue, session=True,
                             id=f"i40-gaps-send-{uuid.uuid4().hex[:8]}")
    assert await send(handle, "are you there") == "you said: are you there"
    return handle


def _unfinished(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, UnfinishedUpdateHandlersWarning)]


async def test_a_send_the_guardrail_ends_the_run_on_fails_with_its_reason(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    with warnings.catch_warnings(record=True) as caught:  # the worker runs in this process
        warnings.simplefilter("always")
        raw = await _session(tc, queue)
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await raw.execute_update("send", SendInput(content="do my homework"))
        helped = await _session(tc, queue)
        with pytest.raises(RunEnded) as ended:
            await send(helped, "do my homework")
    # the worker finished the update: none was left in flight as the run ended
    assert _unfinished(caught) == []
    # a raw client: the update's failure is the run's, typed (not "the Workflow completed
    # before the Update completed")
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert (cause.type, cause.message) == ("GuardrailTripped", TRIPPED)
    # the helper: the run's status, reason, words and partial run
    err = ended.value
    assert (err.status, err.reason, err.message) == ("FAILED", "GuardrailTripped", TRIPPED)
    assert err.partial is not None  # the conversation, up to the message it ended on
    assert [p.content for m in err.partial.messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, UserPart)][-1] == "do my homework"
    assert str(err) == f"GuardrailTripped: {TRIPPED}"


async def test_a_send_to_a_run_that_has_ended_says_how_it_ended(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    handle = await _session(tc, queue)
    with pytest.raises(RunEnded):  # it ends the run
        await send(handle, "do my homework")
    with pytest.raises(RunEnded) as failed:  # sent after it failed
        await send(handle, "still there?")
    err = failed.value
    assert (err.status, err.reason, err.message) == ("FAILED", "GuardrailTripped", TRIPPED)
    assert err.partial is not None
    # a run that completed: its status, and what to do
    done = await start_run(tc, ending, "hello", task_queue=queue)
    assert (await done.result()).output == "you said: hello"
    with pytest.raises(RunEnded) as completed:
        await send(done, "and now?")
    assert (completed.value.status, completed.value.reason) == ("COMPLETED", "COMPLETED")
    assert completed.value.message == (f"run {done.id!r} has ended (COMPLETED): it takes no more "
                                       "messages; start a new run with its messages as history")


async def _turn(http: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with http.stream("POST", f"/agents/{ending.name}", json=body) as response:
        assert response.status_code == 200, await response.aread()
        return [json.loads(line[6:]) async for line in response.aiter_lines()
                if line.startswith("data: ")]


async def test_serve_reports_a_message_that_ended_the_session_as_its_reason(
    served: tuple[Client, str],
) -> None:
    tc, queue = served
    app = create_app(ServeConfig(client=tc, agents=[ending], task_queue=queue))
    transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
    thread = f"i40-gaps-send-{uuid.uuid4().hex[:8]}"
    hello = {"id": "m1", "role": "user", "content": "hello"}
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                 timeout=60) as http:
        first = await _turn(http, {"threadId": thread, "runId": "r1", "messages": [hello]})
        assert first[-1]["type"] == "RUN_FINISHED", first[-1]
        assert first[-1]["result"] == "you said: hello"
        second = await _turn(http, {"threadId": thread, "runId": "r2", "messages": [
            hello, {"id": "m2", "role": "assistant", "content": "you said: hello"},
            {"id": "m3", "role": "user", "content": "do my homework"}]})
    assert second[-1]["type"] == "RUN_ERROR", second[-1]
    assert (second[-1]["code"], second[-1]["message"]) == ("GuardrailTripped", TRIPPED)
    assert "Update" not in json.dumps(second)
    run = tc.get_workflow_handle(thread_workflow_id(thread))
    assert (await run.describe()).status == WorkflowExecutionStatus.FAILED
