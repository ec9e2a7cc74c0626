"""Tools the client runs, in real runs: the call is recorded, the run waits durably for its
result (`tool_result`, `towline respond`), checked against the pending call and the tool's
output type; a timeout records the call `unknown` (or `denied` when idempotent); a result that
arrives after a worker restart; a client tool named by the run's input (a JSON schema)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cli_helpers import towline
from hitl_agents import front, steps_prompt
from readme import cli_env
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from towline.client import run_error, start_run
from towline.results import ClientToolSpec, RunResult
from towline.review import pending, tool_result
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision, ToolResultInput

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def waiting(handle: WorkflowHandle[Any, Any]) -> Any:
    for _ in range(400):
        calls = await pending(handle)
        if calls:
            return calls[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no client call became pending")


async def refused(handle: WorkflowHandle[Any, Any], name: str, arg: Any, says: str) -> None:
    with pytest.raises(WorkflowUpdateFailedError) as e:
        await handle.execute_update(name, arg)
    assert says in str(e.value.cause), e.value.cause


async def test_a_client_tool_waits_for_its_result_which_is_checked(client: Client, target: str) -> None:
    prompt = steps_prompt([("pick_color", {"prompt": "your favourite?"})],
                          [("pick_color", {"prompt": "and your second?"})])
    async with towline_worker(client, [front]) as (tc, queue):
        handle = await start_run(tc, front, prompt, task_queue=queue)
        call = await waiting(handle)
        assert (call.kind, call.decisions, call.tool_name) == ("client", ["respond"], "pick_color")
        state: dict[str, Any] = await handle.query("state")
        assert state["status"] == "waiting" and state["waiting_for"] == "tool_result"
        assert (await (await handle.describe()).memo())["towline.waiting"] == "tool_result"
        await refused(handle, "tool_result", ToolResultInput(call_id="nope", result={}),
                      "no tool call 'nope' is waiting")
        await refused(handle, "approve", ApprovalDecision(call_id=call.call_id),
                      "a client tool's: it takes its result")
        await refused(handle, "tool_result", ToolResultInput(call_id=call.call_id, result=7),
                      "is not what 'pick_color' returns")
        done = await towline("respond", handle.id, "--result", '{"color": "teal"}',
                             env=cli_env(target))
        assert done.code == 0, done
        assert done.out.startswith(f"gave the result of tool call {call.call_id} in run {handle.id}")
        second = call
        for _ in range(400):  # the next step's call waits now
            second = await waiting(handle)
            if second.call_id != call.call_id:
                break
            await asyncio.sleep(0.05)
        await refused(handle, "tool_result", ToolResultInput(call_id=call.call_id, result={}),
                      f"no tool call {call.call_id!r} is waiting")  # a second result: refused
        await tool_result(handle, second.call_id, {"color": "red"})
        result: RunResult = await handle.result()
    assert result.output == ("pick_color=succeeded:{'color': 'teal'}; "
                             "pick_color=succeeded:{'color': 'red'}")
    assert result.counters.tool_calls == 2


async def test_a_timeout_is_unknown_unless_the_tool_is_idempotent(client: Client) -> None:
    async with towline_worker(client, [front]) as (tc, queue):
        denied = await start_run(tc, front, steps_prompt([("read_location", {})]), task_queue=queue)
        result: RunResult = await denied.result()
        assert result.output.startswith("read_location=denied:no result from the client within")
        uncertain = await start_run(tc, front, steps_prompt([("confirm_in_app", {"question": "ok?"})]),
                                    task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await uncertain.result()
    err = run_error(failed.value)
    assert err.reason == "UncertainToolEffect" and "the client may have run it" in err.message


async def test_a_result_after_a_worker_restart_and_a_schema_tool_from_the_input(client: Client) -> None:
    spec = ClientToolSpec(name="choose_file", description="Let the user choose a file",
                          parameters={"type": "object", "properties": {"kind": {"type": "string"}},
                                      "required": ["kind"]},
                          result_schema={"type": "object", "required": ["path"]})
    prompt = steps_prompt([("choose_file", {"kind": "pdf"})])
    async with towline_worker(client, [front]) as (tc, queue):
        handle = await start_run(tc, front, prompt, task_queue=queue, client_tools=[spec])
        call = await waiting(handle)
        assert call.tool_name == "choose_file"
    # no worker now: the run waits in Temporal; the result comes once a worker is back
    async with towline_worker(client, [front], task_queue=queue) as (tc, _):
        handle = tc.get_workflow_handle(handle.id, result_type=RunResult)
        await refused(handle, "tool_result", ToolResultInput(call_id=call.call_id, result={"p": 1}),
                      "'path' is a required property")
        await tool_result(handle, call.call_id, {"path": "/tmp/a.pdf"}, digest=call.digest)
        result: RunResult = await handle.result()
    assert result.output == "choose_file=succeeded:{'path': '/tmp/a.pdf'}"


async def test_the_client_tools_page_command(client: Client, target: str) -> None:
    from readme import readme

    from examples.frontend import agent

    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "pick one", task_queue=queue, id="front-1")
        await waiting(handle)
        done = await readme("""towline respond front-1 pick_1 --result '{"color": "teal"}'""",
                            env=cli_env(target))
        assert done.code == 0, done
        result: RunResult = await handle.result()
    assert result.output == "You picked teal."
