"""An update whose validator runs before the run's first step: refused or answered, never a
failed workflow task.

A validator is read-only: it may not record a `workflow.patched` marker (the engine's, once
there is one after 1.0, or the agent version's). Update-with-start (and an update that reaches a
new run before its first workflow task) has the validator run in the activation that starts the
run, before the run's code recorded its markers. The
hypothesis fuzz of `test_fuzz_clients.py` found it: `approve` on a fresh session failed the
task with `ReadOnlyContextError`, again on every retry.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cli_helpers import patch_ids, task_failures
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy

from towline import Agent, tool
from towline.runtime.fingerprint import agent_version
from towline.testing import towline_worker
from towline.workflows.versions import version_patch


@tool
def echo(text: str) -> str:
    """Say `text` back."""
    return text


agent = Agent(name="first-activation", model="test", tools=[echo])


def _start(queue: str) -> WithStartWorkflowOperation[Any, Any]:
    return WithStartWorkflowOperation(
        "AgentRun", {"agent": agent.name, "prompt": "hi", "session": True},
        id=f"first-activation-{uuid.uuid4().hex[:8]}", task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL)


NOPE = {"call_id": "nope"}
"""A call no run waits on: every decision about it is refused."""


# every update with a validator
@pytest.mark.parametrize(("update", "args"), [
    ("approve", NOPE), ("reject", NOPE), ("edit", {**NOPE, "args": {"text": "x"}}),
    ("respond", {**NOPE, "result": "x"}), ("tool_result", {**NOPE, "result": "x"}),
    ("decide", {"decisions": [{"kind": "approve", **NOPE}]}), ("set_policy", {"rules": {}}),
])
async def test_an_update_validated_before_the_first_step_is_refused_not_a_failed_task(
    client: Client, update: str, args: dict[str, Any],
) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        start = _start(queue)
        with pytest.raises(WorkflowUpdateFailedError):
            await tclient.execute_update_with_start_workflow(
                update, args, start_workflow_operation=start)
        handle = await start.workflow_handle()
        # the session goes on: it answers a good message and ends when told
        await handle.execute_update("send", {"content": "again"})
        await handle.signal("end")
        await handle.result()
        assert not await task_failures(handle)
        # the run's first step recorded its markers: 1.0's, the agent version alone
        events = [e async for e in handle.fetch_history_events()]
        assert patch_ids(events) == [version_patch(agent_version(agent))]
