"""Bad run input ends the run with a typed error instead of leaving it stuck."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from towline import Agent, RunError
from towline.client import run, run_error
from towline.testing import towline_worker

agent = Agent(name="input-checks", model="test")


async def _fail_with(client: Client, raw: Any) -> RunError:
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await tclient.start_workflow(
            "AgentRun", raw, id=f"input-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    return run_error(failure.value)


async def test_malformed_input_fails_the_run_naming_every_problem(client: Client) -> None:
    error = await _fail_with(client, {"prompt": "hi", "limits": {"max_steps": 0}})
    assert error.reason == "InvalidRunInput"
    assert "agent: Field required" in error.message
    assert "limits.max_steps" in error.message


async def test_input_that_is_not_an_object_fails_the_run(client: Client) -> None:
    error = await _fail_with(client, "just a prompt")
    assert error.reason == "InvalidRunInput"


async def test_unknown_agent_fails_the_run(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        with pytest.raises(RunError) as failure:
            await run(tclient, "no-such-agent", "hi", task_queue=queue)
    assert failure.value.reason == "UnknownAgent"
    assert "no-such-agent" in failure.value.message
