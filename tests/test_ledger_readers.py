"""Every reader of a live run's counters reads the right source (engine 4, issue 29).

A live run's visible counters (memo `towline.counters`, search attributes) are written at
status changes, at the end and at most every 10 steps or 300 s: between, they lag. The
history holds the exact ones. A run held in its third tool call: `towline show` prints the
confirmed counters (the last header) and how far behind the memo is, `towline runs` lists
the exact figures, and the Temporal UI's current details (free: no event) show them too;
once the run ends, the memo, the attributes and every reader agree with the result.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

from cli_helpers import cli_env, towline
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle

from towline import Agent, ModelResponse, ToolCallPart, tool
from towline.client import start_run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.runtime import search_attributes as sa
from towline.runtime.ledger import MEMO_KEY, decode_counters, latest_counters
from towline.testing import towline_worker

RELEASE = threading.Event()


@tool
def tick() -> str:
    """Tick."""
    return "tock"


@tool
def hold() -> str:
    """Wait until the test lets go (at most 60 s)."""
    RELEASE.wait(60)
    return "let go"


def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Two ticks, then a call that holds, then the answer."""
    if info.run_step <= 3:
        name = "hold" if info.run_step == 3 else "tick"
        return ModelResponse(parts=[ToolCallPart(tool_name=name, tool_call_id=f"c{info.run_step}")])
    return "done"


AGENT = Agent(name="ledger-readers", model=FunctionModel(script, model_name="ledger-readers"),
              tools=[tick, hold])


async def _held(handle: WorkflowHandle[Any, Any]) -> None:
    """Wait until the third tool call is scheduled (its header: tool_calls 3)."""
    for _ in range(400):
        found = latest_counters((await handle.fetch_history()).events)
        if found is not None and found.tool_calls == 3:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never reached its third tool call")


async def test_live_readers_read_the_history_not_the_lagging_memo(
    client: Client, target: str, namespace: str
) -> None:
    env = cli_env(target, namespace=namespace)
    RELEASE.clear()
    wid = f"ledger-readers-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [AGENT]) as (tclient, queue):
        handle = await start_run(tclient, AGENT, "go", task_queue=queue, id=wid)
        try:
            await _held(handle)
            description = await handle.describe()
            memo = decode_counters(description.raw_description.workflow_execution_info.memo
                                   .fields[MEMO_KEY])
            # the visible counters lag: still the start request's
            assert (memo.run_step, memo.tool_calls) == (0, 0)
            assert sa.values_of(description.typed_search_attributes)["TowlineToolCalls"] == 0

            shown = await towline("show", wid, "--json", env=env)
            assert shown.code == 0, shown
            data = json.loads(shown.out)
            assert (data["counters"]["run_step"], data["counters"]["tool_calls"]) == (3, 3)
            assert data["counters"]["requests"] == 3
            assert data["memo_counters"]["run_step"] == 0
            text = await towline("show", wid, env=env)
            assert "Memo      at step 0, tool calls 0 (3 steps behind the confirmed counters" \
                in text.out, text.out
            listed = await towline("runs", "--query", f'WorkflowId = "{wid}"', "--json", env=env)
            [row] = json.loads(listed.out)
            assert (row["run_step"], row["tool_calls"], row["total_tokens"]) == (3, 3, 45)

            metadata = await handle.query("__temporal_workflow_metadata",
                                          result_type=WorkflowMetadata)
            assert "step 3/50, tool calls 3, requests 3" in metadata.current_details
        finally:
            RELEASE.set()
        result = await handle.result()

    # at the end every source agrees with the result, exactly
    description = await handle.describe()
    memo = decode_counters(description.raw_description.workflow_execution_info.memo.fields[MEMO_KEY])
    assert memo == result.counters
    values = sa.values_of(description.typed_search_attributes)
    assert (values["TowlineRunStep"], values["TowlineToolCalls"], values["TowlineTotalTokens"]) \
        == (result.counters.run_step, result.counters.tool_calls, result.counters.total_tokens)
    data = json.loads((await towline("show", wid, "--json", env=env)).out)
    assert data["counters"] == result.counters.model_dump(mode="json")
    assert "Memo " not in (await towline("show", wid, env=env)).out
    [row] = json.loads((await towline("runs", "--query", f'WorkflowId = "{wid}"', "--json",
                                      env=env)).out)
    assert (row["run_step"], row["tool_calls"]) == (4, 3)
