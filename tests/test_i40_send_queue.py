"""Messages queued while a session is busy count together against the payload limit (issue 40).

Each `send` passed the size check alone, and the messages queued meanwhile then joined the
conversation together, over the limit: the session ended `PayloadTooLarge`. Now the message
that would push the queue over is refused, with a clear error to its sender, and the session
answers the others and goes on. A real session on the dev server, busy on a call that waits
for approval while the messages arrive.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateStage

from towline import Agent, ModelRequest, ModelResponse, ToolCallPart, UserPart, tool
from towline.capabilities import ToolApproval
from towline.client import start_run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult
from towline.review import approve, pending
from towline.testing import towline_worker
from towline.workflows import SendInput
from towline.workflows.run import PAYLOAD_LIMIT

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="session")]

PART = PAYLOAD_LIMIT * 3 // 8
"""Characters of one message: under the limit alone, and three of them over it."""


@tool
def check(item: str) -> str:
    """Check something (asks a person first: the session is busy meanwhile)."""
    return f"checked {item}"


def _sizes(messages: list[Message]) -> str:
    """The lengths of the user messages the model saw."""
    return ",".join(str(len(str(p.content))) for m in messages if isinstance(m, ModelRequest)
                    for p in m.parts if isinstance(p, UserPart))


def busy_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The first turn checks something (and waits for approval); every answer names the
    lengths of the user messages it saw."""
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="check", args={"item": "a"},
                                                 tool_call_id="c1")])
    return f"saw {_sizes(messages)}"


busy = Agent(name="i40-busy-session", model=FunctionModel(busy_model, model_name="i40-busy"),
             tools=[check], capabilities=[ToolApproval(tools=["check"])])


async def test_queued_messages_over_the_limit_together_refuse_the_last_and_the_session_goes_on(
        client: Client) -> None:
    async with towline_worker(client, [busy]) as (tc, queue):
        handle = await start_run(tc, busy, "hi", task_queue=queue, session=True)
        while not await pending(handle):  # busy: the first turn waits for approval
            await asyncio.sleep(0.05)
        queued: list[Any] = []
        for letter in "ab":  # each well under the limit, both together too
            queued.append(await handle.start_update(
                "send", SendInput(content=letter * PART),
                wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=str))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(handle.execute_update("send", SendInput(content="c" * PART)), 30)
        told = str(refused.value.cause)
        assert "2 message(s) queued before it" in told and "payload limit" in told, told
        assert "not queued" in told, told

        await approve(handle)
        answers = [await asyncio.wait_for(u.result(), 60) for u in queued]
        assert answers == [f"saw 2,{PART},{PART}"] * 2  # both answered, in one turn
        # the session lives on and takes a message that fits
        again = await asyncio.wait_for(handle.execute_update("send", SendInput(content="small")), 60)
        assert again == f"saw 2,{PART},{PART},5"
        await handle.signal("end")
        result: RunResult = await asyncio.wait_for(handle.result(), 60)
    assert result.output == again and result.session_end == "request"
