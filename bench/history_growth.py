"""How a run's Temporal history grows with its length, as ratios against a baseline.

Runs an agent that calls one tool per step for N steps (N = 5, 10, 20, 40) on
a real dev server and measures the history size (bytes of all events). The
baseline, measured in the same run, is a plain workflow that executes the same
number of activities with constant-size payloads: it grows linearly. The report
prints bytes per step and the ratio to the baseline at each N, so a history
that grows with the square of the run shows up as a ratio that keeps rising.

    python bench/history_growth.py            # prints a table
    python bench/history_growth.py --json     # machine-readable

Timings are not measured here: sizes are exact and do not depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import leave
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from towline import Agent, Limits, ModelResponse, ToolCallPart, tool
from towline.client import run
from towline.devserver import start_dev_server
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

PAYLOAD = "x" * 200


@tool
def lookup(key: str) -> str:
    """Return a constant-size record."""
    return PAYLOAD + key


def _steps_of(messages: list[Message]) -> int:
    return sum(1 for m in messages if m.kind == "response")


def script(steps: int) -> FunctionModel:
    def respond(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        done = _steps_of(messages)
        if done + 1 >= steps:
            return "done"
        return ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"key": f"k{done}"})])

    return FunctionModel(respond, model_name=f"bench-{steps}")


@activity.defn(name="bench.echo")
async def echo(text: str) -> str:
    return PAYLOAD + text


@workflow.defn(name="BenchBaseline")
class Baseline:
    @workflow.run
    async def run(self, steps: int) -> int:
        for i in range(2 * steps - 1):  # one model + one tool activity per step, like the agent
            await workflow.execute_activity(
                "bench.echo", str(i), start_to_close_timeout=timedelta(seconds=10)
            )
        return steps


async def _history_bytes(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(e.ByteSize() for e in history.events)


async def measure(sizes: list[int]) -> list[dict[str, Any]]:
    env = await start_dev_server(db_path=None, ui=False)
    rows: list[dict[str, Any]] = []
    try:
        client = env.client
        queue = f"bench-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[Baseline], activities=[echo],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            for n in sizes:
                agent = Agent(name=f"bench-agent-{n}", model=script(n), tools=[lookup],
                              limits=Limits(max_steps=n + 1))
                async with towline_worker(client, [agent]) as (tclient, tq):
                    wid = f"bench-agent-{n}-{uuid.uuid4().hex[:6]}"
                    await run(tclient, agent, "go", task_queue=tq, id=wid)
                    agent_bytes = await _history_bytes(client, wid)
                bid = f"bench-base-{n}-{uuid.uuid4().hex[:6]}"
                await client.execute_workflow(Baseline.run, n, id=bid, task_queue=queue)
                base_bytes = await _history_bytes(client, bid)
                rows.append({
                    "steps": n, "agent_bytes": agent_bytes, "baseline_bytes": base_bytes,
                    "agent_bytes_per_step": agent_bytes // n,
                    "ratio": round(agent_bytes / base_bytes, 2),
                })
    finally:
        await env.shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5,10,20,40", help="comma-separated step counts")
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args()
    rows = asyncio.run(measure([int(s) for s in args.sizes.split(",")]))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'steps':>6} {'agent bytes':>12} {'baseline':>10} {'bytes/step':>11} {'ratio':>6}")
        for r in rows:
            print(f"{r['steps']:>6} {r['agent_bytes']:>12} {r['baseline_bytes']:>10} "
                  f"{r['agent_bytes_per_step']:>11} {r['ratio']:>6}")
    leave(0)


if __name__ == "__main__":
    main()
