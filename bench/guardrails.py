"""What an input guardrail backed by a model costs a run's latency: before the model request,
or alongside it, against the same run with no guardrail (the baseline, measured in the same
run, interleaved).

    python bench/guardrails.py                  # a table
    python bench/guardrails.py --json           # machine-readable
    python bench/guardrails.py --model-seconds 1 --guard-seconds 0.5 --repeats 7

Each run makes one model request, which its `FunctionModel` answers after `--model-seconds`;
the guard model answers PASS (or, for the trip rows, FAIL) after `--guard-seconds`. A run's
latency is from its start request to its result, on a dev server started here (in memory) with
one in-process worker. Sequential should cost about the guard's time on top of the baseline,
parallel about nothing when it passes; a parallel trip ends once the guard has answered and
the in-flight request's worker has confirmed its cancellation (its next heartbeat: the agents
use a 1 s heartbeat timeout), and its ledger counts no request, while a sequential trip never
starts one. Wall times on a loaded machine are noisy: read the ratios, median of the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import leave
from temporalio.client import Client, WorkflowFailureError

from towline import Agent, Usage
from towline.capabilities import InputGuardrail
from towline.client import run_error, start_run
from towline.devserver import start_dev_server
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker


def _asked(messages: list[Message]) -> str:
    texts = [p.text for m in messages if isinstance(m, ModelRequest) for p in m.parts
             if isinstance(p, UserPart)]
    return texts[-1].rsplit(":\n", 1)[-1] if texts else ""


def _agents(model_seconds: float, guard_seconds: float) -> dict[str, Agent]:
    async def answer(messages: list[Message], info: ModelInfo) -> str:
        await asyncio.sleep(model_seconds)
        return "done"

    async def judge(messages: list[Message], info: ModelInfo) -> str:
        await asyncio.sleep(guard_seconds)
        return "FAIL\nNo." if "trip" in _asked(messages) else "PASS"

    model = FunctionModel(answer, model_name="bench-guard-main")
    guard = FunctionModel(judge, model_name="bench-guard-judge",
                          usage=Usage(requests=1, input_tokens=7, output_tokens=3))
    beat = timedelta(seconds=1)

    def agent(name: str, *capabilities: Any) -> Agent:
        return Agent(name=name, model=model, capabilities=capabilities, model_heartbeat_timeout=beat)

    return {
        "baseline": agent("bench-guard-none"),
        "sequential": agent("bench-guard-seq", InputGuardrail(model=guard, policy="p",
                                                              run_in_parallel=False)),
        "parallel": agent("bench-guard-par", InputGuardrail(model=guard, policy="p")),
    }


async def _latency(client: Client, agent: Agent, queue: str, prompt: str) -> tuple[float, int]:
    """Seconds from the start request to the result or failure, and the requests counted."""
    started = time.perf_counter()
    handle = await start_run(client, agent, prompt, task_queue=queue)
    try:
        result = await handle.result()
        requests = result.counters.requests
    except WorkflowFailureError as e:
        partial = run_error(e).partial
        requests = partial.counters.requests if partial is not None else -1
    return time.perf_counter() - started, requests


async def measure(model_seconds: float, guard_seconds: float, repeats: int) -> dict[str, Any]:
    """Median latencies of each kind of run (interleaved), and their ratio to the baseline."""
    agents = _agents(model_seconds, guard_seconds)
    env = await start_dev_server(db_path=None, ui=False)
    cases = [("baseline", "baseline", "go"), ("sequential pass", "sequential", "go"),
             ("parallel pass", "parallel", "go"), ("sequential trip", "sequential", "trip"),
             ("parallel trip", "parallel", "trip")]
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    requests: dict[str, int] = {}
    try:
        async with towline_worker(env.client, list(agents.values())) as (client, queue):
            await _latency(client, agents["baseline"], queue, "warm up")
            for _ in range(repeats):
                for name, kind, prompt in cases:
                    seconds, made = await _latency(client, agents[kind], queue, prompt)
                    times[name].append(seconds)
                    requests[name] = made
    finally:
        await env.shutdown()
    base = statistics.median(times["baseline"])
    return {
        "model_seconds": model_seconds, "guard_seconds": guard_seconds, "repeats": repeats,
        "rows": [{"case": name, "median_seconds": round(statistics.median(times[name]), 3),
                  "ratio_to_baseline": round(statistics.median(times[name]) / base, 2),
                  "requests_counted": requests[name]} for name, _, _ in cases],
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model-seconds", type=float, default=3.0)
    parser.add_argument("--guard-seconds", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args.model_seconds, args.guard_seconds, args.repeats))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"model {args.model_seconds:g} s, guard {args.guard_seconds:g} s, "
          f"median of {args.repeats}")
    print(f"{'case':<17}{'seconds':>9}{'x baseline':>12}{'requests':>10}")
    for row in report["rows"]:
        print(f"{row['case']:<17}{row['median_seconds']:>9.3f}{row['ratio_to_baseline']:>12.2f}"
              f"{row['requests_counted']:>10}")
    return 0


if __name__ == "__main__":
    leave(main())
