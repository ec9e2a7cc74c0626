"""A long run continues-as-new and carries everything across, exactly.

`RunInput.continue_as_new_after_events` lowers the threshold at which a run
continues-as-new (Temporal's own suggestion needs thousands of events), so a
run of a few steps crosses several workflow executions. The result must be
indistinguishable from a run that never continued: the complete canonical
history, the contributed state (a reducer included), and a ledger whose
counters continue across executions, each new execution starting from the
memo `towline.counters` that the previous one ended with.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from temporalio.client import Client

from towline import Agent, Middleware, ToolContext, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo
from towline.results import Counters, RunInput
from towline.runtime.ledger import MEMO_KEY, counters_from_history, decode_counters
from towline.testing import run_to_end, towline_worker

STEPS = 8
"""Tool-calling steps before the final answer."""


@tool
def note(ctx: ToolContext, n: int) -> dict[str, Any]:
    """Note step `n`; returns what the run looked like to the tool."""
    return {"n": n, "run_id": ctx.run_id, "step": ctx.run_step, "turns": ctx.state["turns"]}


def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Call `note` STEPS times, then answer with how many messages the model saw."""
    if info.run_step <= STEPS:
        return ModelResponse(parts=[ToolCallPart(tool_name="note", args={"n": info.run_step})])
    return f"saw {len(messages)} messages"


def count_turn(state: dict[str, Any]) -> dict[str, Any]:
    """Contributed state: a last-write-wins counter and a reduced list."""
    return {"turns": state["turns"] + 1, "seen": [state["turns"] + 1]}


def _extend(old: list[int] | None, new: list[int]) -> list[int]:
    return [*(old or []), *new]


agent = Agent(
    name="can-long-run",
    model=FunctionModel(script, model_name="can-script"),
    tools=[note],
    capabilities=[
        Middleware(
            "turn-counter", before_model=count_turn,
            state_schema={"turns": 0, "seen": ([], _extend)},
        )
    ],
)


async def test_long_run_continues_as_new_and_carries_everything(client: Client) -> None:
    async with towline_worker(client, [agent]) as (tclient, queue):
        workflow_id = f"can-{uuid4().hex[:8]}"
        result, histories = await run_to_end(
            tclient, RunInput(agent=agent.name, prompt="take notes", continue_as_new_after_events=30),
            task_queue=queue, id=workflow_id)

    assert len(histories) >= 3, "the run should have continued-as-new at least twice"
    total = STEPS + 1

    # The canonical history is complete: the prompt, then call/return pairs, then the answer.
    messages = result.messages
    assert len(messages) == 2 + 2 * STEPS
    first = messages[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], UserPart)
    calls = [c for m in messages if isinstance(m, ModelResponse) for c in m.tool_calls]
    returns = [
        p for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert [c.args["n"] for c in calls] == list(range(1, STEPS + 1))
    assert [r.tool_call_id for r in returns] == [c.tool_call_id for c in calls]
    assert len({m.id for m in messages}) == len(messages)
    # The model, in the last execution, was sent the whole history.
    assert result.output == f"saw {len(messages) - 1} messages"
    # Tools saw the stable run id and the carried state in every execution.
    assert [r.content for r in returns] == [
        {"n": n, "run_id": workflow_id, "step": n, "turns": n} for n in range(1, STEPS + 1)
    ]

    # Contributed state: the counter and the reduced list span all executions.
    assert result.state == {"turns": total, "seen": list(range(1, total + 1))}

    # The ledger continues exactly.
    c = result.counters
    assert (c.run_step, c.requests, c.tool_calls) == (total, total, STEPS)
    assert (c.input_tokens, c.output_tokens) == (10 * total, 5 * total)
    assert result.usage.total_tokens == c.total_tokens
    assert result.run_id == workflow_id

    snapshots: list[Counters] = []
    for i, events in enumerate(histories):
        recorded = counters_from_history(events)
        if i > 0:
            # The new execution's start event carries the memo and the input's counters the
            # previous one ended with (its last confirmed counters), and goes on from them.
            started = events[0].workflow_execution_started_event_attributes
            assert MEMO_KEY in started.memo.fields
            assert decode_counters(started.memo.fields[MEMO_KEY]) == snapshots[-1]
            assert recorded[0].run_step == snapshots[-1].run_step + 1
        snapshots.extend(recorded)
    steps = [s.run_step for s in snapshots]
    assert steps == sorted(steps) and steps[-1] == total
    assert set(steps) == set(range(1, total + 1))
    assert snapshots[-1] == c
