"""`towline reset` while a non-idempotent call is in flight never runs it a second time unasked.

Temporal writes `ActivityTaskStarted` only when an attempt ends, so a transfer still running
shows no start in the history: the reset must read a scheduled call with no outcome as "may
have taken effect", list it as running, and refuse without `--yes` (real run on the dev
server, the command a subprocess, the transfer really in flight).
"""

from __future__ import annotations

import asyncio
import uuid

from cli_helpers import cli_env, towline
from temporalio.client import Client

from towline import Agent, ToolContext, tool
from towline.client import start_run
from towline.messages import Message, ModelResponse, ToolCallPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

TRANSFERS: list[str] = []
"""The run id of every transfer that took effect."""
RELEASE = asyncio.Event()


@tool
async def transfer(ctx: ToolContext, amount: int) -> str:
    """Move money (not idempotent): records the effect, then takes its time to confirm."""
    TRANSFERS.append(ctx.run_id)
    await RELEASE.wait()
    return f"moved {amount}"


def _script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if sum(isinstance(m, ModelResponse) for m in messages) == 0:
        return ModelResponse(parts=[ToolCallPart(tool_name="transfer", args={"amount": 100},
                                                 tool_call_id="t1")])
    return "transferred"


bank = Agent(name="audit-bank", model=FunctionModel(_script, model_name="audit-bank"),
             tools=[transfer])


async def test_reset_during_an_in_flight_transfer_refuses_without_yes(
    client: Client, target: str, namespace: str,
) -> None:
    env = cli_env(target, namespace)
    run_id = f"bank-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [bank]) as (tclient, queue):
        handle = await start_run(tclient, bank, "pay", task_queue=queue, id=run_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while run_id not in TRANSFERS:
            assert loop.time() < deadline, "the transfer never started"
            await asyncio.sleep(0.05)
        try:
            done = await towline("reset", run_id, "--to-step", "1", env=env)
            assert done.code == 1, done
            assert "transfer" in done.out and "running: may have taken effect" in done.out, done
            assert "--yes" in done.err, done
            desc = await handle.describe()
            assert desc.run_id == handle.result_run_id  # not reset: the same execution goes on
        finally:
            RELEASE.set()
        result = await handle.result()
    assert result.output == "transferred"
    assert TRANSFERS.count(run_id) == 1, TRANSFERS
