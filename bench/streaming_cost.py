"""What streaming costs a run's Temporal history: events and bytes per step, on and off.

Runs the same agent on a real dev server in four ways — text streaming off or
on (`RunInput.stream`), with no subscriber or with one following the run
(`towline.client.events`, as `towline watch` does) — and reads each history
back: events and bytes per step, and how many of them are the model
activity's text batches (signals) and the subscriber's polls (updates). The
model writes `--words` words per step at `--pace` seconds a word (a provider's
token rate), then calls one tool; the run has `--steps` steps.

    python bench/streaming_cost.py                  # prints a table
    python bench/streaming_cost.py --json           # machine-readable
    python bench/streaming_cost.py --long           # also one long answer (the batch bound)

Counts are exact for a run; they vary a little between runs (batches follow the
model's timing). Timings are not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import leave
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from towline import Agent, Limits, ModelSettings, ToolCallPart, tool
from towline.activities.streaming import MAX_BATCHES
from towline.client import events, start_run
from towline.devserver import start_dev_server
from towline.messages import Message, ModelResponse
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker


@tool
def note(n: int) -> str:
    """Record step `n`."""
    return f"noted {n}"


def writer(steps: int, words: int, pace: float) -> FunctionModel:
    async def write(messages: list[Message], info: ModelInfo) -> AsyncIterator[str | ToolCallPart]:
        for i in range(words):
            await asyncio.sleep(pace)
            yield f"word{i} "
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        if done + 1 < steps:
            yield ToolCallPart(tool_name="note", args={"n": done + 1})

    return FunctionModel(write, model_name=f"writer-{steps}-{words}")


async def _history(client: Client, workflow_id: str) -> dict[str, int]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    return {
        "events": len(kinds),
        "bytes": sum(e.ByteSize() for e in history.events),
        "signals": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        "updates": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
    }


async def _one(client: Client, agent: Agent, steps: int, stream: bool, watched: bool) -> dict[str, Any]:
    async with towline_worker(client, [agent]) as (tclient, queue):
        wid = f"bench-stream-{uuid.uuid4().hex[:8]}"
        handle = await start_run(tclient, agent, "write", task_queue=queue, id=wid, stream=stream)
        seen = [e async for e in events(handle)] if watched else []
        await handle.result()
        counts = await _history(client, wid)
    texts = sum(1 for e in seen if e.type == "text")
    return {"stream": stream, "watched": watched, "steps": steps, **counts,
            "events_per_step": round(counts["events"] / steps, 1),
            "bytes_per_step": counts["bytes"] // steps,
            "text_events_seen": texts if watched else None}


async def measure(steps: int, words: int, pace: float, long: bool) -> list[dict[str, Any]]:
    env = await start_dev_server(db_path=None, ui=False)
    rows: list[dict[str, Any]] = []
    try:
        agent = Agent(name="bench-stream", model=writer(steps, words, pace), tools=[note],
                      limits=Limits(max_steps=steps + 1), settings=ModelSettings(stream=False))
        for stream, watched in ((False, False), (True, False), (False, True), (True, True)):
            rows.append({"case": "steps", **await _one(env.client, agent, steps, stream, watched)})
        if long:  # one answer far longer than the batches can follow: the bound holds
            one = Agent(name="bench-stream-long", model=writer(1, 1500, 0.02),
                        settings=ModelSettings(stream=True))
            for watched in (False, True):
                rows.append({"case": "long answer (30 s)",
                             **await _one(env.client, one, 1, True, watched)})
    finally:
        await env.shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--words", type=int, default=40, help="words the model writes per step")
    parser.add_argument("--pace", type=float, default=0.05, help="seconds per word")
    parser.add_argument("--long", action="store_true", help="also measure one 30 s answer")
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.steps, args.words, args.pace, args.long))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{args.steps} steps, {args.words} words per step at {args.pace}s a word; "
              f"at most {MAX_BATCHES} text batches per model call")
        print(f"{'case':<20} {'stream':<7} {'watched':<8} {'events':>7} {'ev/step':>8} "
              f"{'bytes/step':>11} {'signals':>8} {'updates':>8}")
        for r in rows:
            print(f"{r['case']:<20} {('on' if r['stream'] else 'off'):<7} "
                  f"{('yes' if r['watched'] else 'no'):<8} {r['events']:>7} "
                  f"{r['events_per_step']:>8} {r['bytes_per_step']:>11} {r['signals']:>8} "
                  f"{r['updates']:>8}")
    leave(0)


if __name__ == "__main__":
    main()
