"""A rollout with Worker Deployment Versioning on the dev server: runs stay on their build.

Build `a` serves the `rollout` agent and is made current with the `temporal` CLI; a run
starts on it and waits for an approval. Build `b` — a definition that could not replay
`a`'s runs — is deployed beside it and made current. New runs go to `b`; the waiting run,
pinned to `a`, is approved and finishes on `a`'s code.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.api.enums.v1 import VersioningBehavior
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkerDeploymentVersion

from towline import Agent, Capability, ModelRequestState, tool
from towline.capabilities import ToolApproval
from towline.client import start_run
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision

TEMPORAL = str(Path(sys.executable).parent / "temporal")


@tool
def transfer(amount: int) -> str:
    """Move money."""
    return f"moved {amount}"


def script(build: str) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        done = [p for m in messages if isinstance(m, ModelRequest)
                for p in m.parts if isinstance(p, ToolReturnPart)]
        if not done:
            return ModelResponse(parts=[ToolCallPart(tool_name="transfer", args={"amount": 5})])
        return f"build {build}: {done[0].content} ({done[0].status})"

    return FunctionModel(answer, model_name=f"rollout-{build}")


class Pause(Capability):
    """Build b's change: a timer before each request, which build a's histories lack."""

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await workflow.sleep(timedelta(milliseconds=10))
        return state


build_a = Agent(name="rollout", model=script("a"), tools=[transfer],
                capabilities=[ToolApproval(tools=["transfer"])])
build_b = Agent(name="rollout", model=script("b"), tools=[transfer], capabilities=[Pause()])


async def _set_current(target: str, namespace: str, deployment: str, build: str) -> None:
    """`temporal worker deployment set-current-version` (retried until the build has polled)."""
    said = b""
    for _ in range(100):
        proc = await asyncio.create_subprocess_exec(
            TEMPORAL, "worker", "deployment", "set-current-version", "--deployment-name",
            deployment, "--build-id", build, "--yes", "--address", target, "--namespace",
            namespace, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        said, _ = await proc.communicate()
        if proc.returncode == 0:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"set-current-version {build} kept failing: {said.decode()}")


async def _pinned_to(handle: WorkflowHandle[Any, Any]) -> tuple[int, str]:
    info = (await handle.describe()).raw_description.workflow_execution_info.versioning_info
    return info.behavior, info.deployment_version.build_id


async def test_runs_finish_on_the_build_they_started_on(
    client: Client, target: str, namespace: str
) -> None:
    deployment = f"rollout-{uuid.uuid4().hex[:8]}"
    queue = f"tq-{deployment}"
    a = WorkerDeploymentVersion(deployment_name=deployment, build_id="a")
    b = WorkerDeploymentVersion(deployment_name=deployment, build_id="b")
    async with towline_worker(client, [build_a], task_queue=queue, deployment=a) as (tc, _):
        await _set_current(target, namespace, deployment, "a")
        waiting = await start_run(tc, build_a, "pay", task_queue=queue)
        state: dict[str, Any] = {}
        for _ in range(400):
            state = await waiting.query("state")
            if state["pending_approvals"]:
                break
            await asyncio.sleep(0.05)
        [call_id] = state["pending_approvals"]

        async with towline_worker(client, [build_b], task_queue=queue, deployment=b):
            await _set_current(target, namespace, deployment, "b")
            fresh = await start_run(tc, build_b, "pay", task_queue=queue)
            assert (await asyncio.wait_for(fresh.result(), 60)).output == \
                "build b: moved 5 (succeeded)"

            await waiting.execute_update("approve", ApprovalDecision(call_id=call_id))
            result = await asyncio.wait_for(waiting.result(), 60)
            assert result.output == "build a: moved 5 (succeeded)"  # a's code, to the end

            pinned = VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
            assert await _pinned_to(waiting) == (pinned, "a")
            assert await _pinned_to(fresh) == (pinned, "b")
