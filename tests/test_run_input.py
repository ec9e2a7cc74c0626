"""Bad run input ends the run with a typed error instead of leaving it stuck."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from towline import Agent, RunError
from towline.client import run, run_error, start_run
from towline.devserver import temporal_binary
from towline.results import Counters, RunInput
from towline.runtime import search_attributes as sa
from towline.runtime.ledger import counters_from_history
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


# --- input as the `temporal` CLI and the UI send it --------------------------------------
#
# Each of these used to fail the workflow *task* (decoding happened before any workflow
# code), so the run retried forever. Now each ends the run: InvalidRunInput, saying why,
# with TowlineStatus=failed recorded, and no workflow task ever failed.


async def _temporal_start(target: str, namespace: str, queue: str, wid: str, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()), "workflow", "start", "--type", "AgentRun", "--task-queue", queue,
        "--workflow-id", wid, "--address", target, "--namespace", namespace, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, (out, err)


async def _failed_run(client: Client, target: str, namespace: str, *args: str) -> RunError:
    wid = f"cli-input-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [agent]) as (tclient, queue):
        await _temporal_start(target, namespace, queue, wid, *args)
        handle = tclient.get_workflow_handle(wid)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
        history = await handle.fetch_history()
        desc = await handle.describe()
    assert not [e for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert desc.typed_search_attributes.get(sa.STATUS) == "failed"
    return run_error(failure.value)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "no input: AgentRun takes one JSON input"),
        (("--input", '{"agent": "input-checks", "prompt": "a"}', "--input", '{"agent": "x"}'),
         "2 inputs given: AgentRun takes exactly one"),
        (("--input", '{"agent": "input-checks", "prompt": "\\ud800"}'),
         "lone surrogate escape"),
        (("--input", '{"agent": "input-checks", "prompt": "hi", "context": {"x": '
          + "[" * 3000 + "]" * 3000 + "}}"), "nested too deeply"),
        (("--input", '{"agent": "input-checks", "prompt": "hi", "limit": {"max_steps": 2}}'),
         "limit: unknown field (did you mean 'limits'?)"),
        (("--input", '{"agent": "input-checks", "prompt": "hi", "session_timeout": -5}'),
         "session_timeout"),
        (("--input", ('{"agent": "input-checks", "prompt": "hi", "limits": {"max_steps": 3, '
                      '"max_step": 2}}')), "limits.max_step: unknown field"),
    ],
    ids=["no-input", "two-inputs", "lone-surrogate", "deep-nesting", "typo-field",
         "negative-timeout", "typo-nested"],
)
async def test_bad_input_from_the_temporal_cli_ends_the_run(
    client: Client, target: str, namespace: str, args: tuple[str, ...], says: str
) -> None:
    error = await _failed_run(client, target, namespace, *args)
    assert error.reason == "InvalidRunInput"
    assert says in error.message, error.message


async def test_an_input_file_that_is_not_utf8_ends_the_run(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(b'{"agent": "input-checks", "prompt": "caf\xe9"}')  # Latin-1, not UTF-8
    error = await _failed_run(client, target, namespace, "--input-file", str(path))
    assert error.reason == "InvalidRunInput"
    assert "not valid UTF-8 (byte 0xe9 at position" in error.message


async def test_a_failed_start_records_status_and_agent(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await tclient.start_workflow(
            "AgentRun", {"agent": "no-such-agent", "prompt": "hi"},
            id=f"input-{uuid.uuid4().hex[:8]}", task_queue=queue)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        desc = await handle.describe()
    attributes = desc.typed_search_attributes
    assert attributes.get(sa.STATUS) == "failed"
    assert attributes.get(sa.AGENT) == "no-such-agent"


async def test_a_client_cannot_seed_the_ledger_with_resume_state(client: Client) -> None:
    forged = {
        "agent": "input-checks", "prompt": None, "limits": {"total_tokens_limit": 10},
        "resume": {
            "messages": [], "state": {}, "usage": {},
            "counters": {"tool_calls": -95, "input_tokens": -999940, "run_step": 1},
            "root_run_id": "someone-elses-run",
        },
    }
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await tclient.start_workflow(
            "AgentRun", forged, id=f"forged-{uuid.uuid4().hex[:8]}", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        history = await handle.fetch_history()
    error = run_error(failure.value)
    assert error.reason == "InvalidRunInput"
    assert "resume is set by the runtime" in error.message
    # no counters were confirmed but the empty partial's, let alone the forged ones
    assert counters_from_history(history.events) == [Counters()]


async def test_send_refuses_unknown_fields(client: Client) -> None:
    session = Agent(name="input-session", model="test")
    async with towline_worker(client, [session]) as (tclient, queue):
        handle = await start_run(tclient, session, "hi", task_queue=queue, session=True)
        for _ in range(100):
            if (await handle.query("state"))["status"] == "waiting":
                break
            await asyncio.sleep(0.05)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("send", {"content": "hi", "contnet": "typo"})
        await handle.signal("end")
        result = await handle.result()
    assert result.counters.run_step == 1


def test_a_tenant_is_measured_in_bytes_as_temporal_does() -> None:
    assert RunInput(agent="a", tenant="x" * 64).tenant == "x" * 64
    with pytest.raises(ValidationError, match="80 bytes in UTF-8; at most 64"):
        RunInput(agent="a", tenant="é" * 40)  # 40 characters, 80 bytes: the server refuses it
