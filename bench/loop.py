"""What a towline step costs against a bare hand-written temporalio loop (issue 10's table).

Both run the same scripted N-step tool loop (per step one model activity and one
`add` tool activity, then a final model answer) against one dev server, in one
process layout (`bench/harness.py`): the server in memory, one worker process per
variant, the client here. Every repeat measures both variants back to back,
alternating which goes first; the table shows medians over the repeats, and each
ratio is the median of the per-repeat ratios towline / bare.

    python bench/loop.py                      # the table (5 repeats)
    python bench/loop.py --repeats 9 --json   # machine-readable
    python bench/loop.py --profile DIR        # py-spy both workers (DIR/<variant>.txt)
    python bench/loop.py --ablate memo,attrs,mark,facts   # what those cost (experiment)

Figures: wall time of one run (start to result, client side), worker CPU (user +
system time of the worker process, all threads, during the run), server CPU,
history bytes (all events of all executions) and events, and billable Temporal Cloud
Actions per step (`towline/telemetry/actions.py`: counted from the histories, plus the heartbeats
each worker counts), for N = 5, 25, 100; the
total wall time of 20 concurrent runs of N = 5; activity payload sizes and how the
model input changes from the first step to the last; history bytes per step by
event type, and by event type and part (an activity's header, input, summary and
result, the run's result, Temporal's own fields); and a long towline run (600 steps, continuing-as-new when Temporal
suggests it, with a `file://` payload store) by execution.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import (
    TOWLINE_VARIANTS,
    VARIANTS,
    Profile,
    WorkerProcess,
    ablation_note,
    bench_parser,
    bench_server,
    check_result,
    cpu_seconds,
    finish,
    start_bench_run,
)
from histories import event_bytes, executions, part_bytes, payload_bytes, per_execution
from temporalio.client import Client

from towline.devserver import DevServerProcess
from towline.runtime.plugin import TowlinePlugin
from towline.telemetry.actions import ActionCount, billable_actions

SIZES = (5, 25, 100)
CONCURRENT, CONCURRENT_STEPS = 20, 5
LONG_STEPS = 600
GOALS: dict[str, dict[str, float]] = {
    "wall": {"towline": 1.10, "towline-idem": 1.10},
    "cpu": {"towline": 1.3, "towline-idem": 1.3},
    "server": {"towline": 1.10, "towline-idem": 1.10},
    "bytes": {"towline": 1.80, "towline-idem": 1.80},
    "concurrent": {"towline": 1.10, "towline-idem": 1.05},
    "actions": {"towline-idem": 1.05},
    "extra events": {"towline": 0.0, "towline-idem": 0.0},
}
"""Each figure's goal (towline / bare, at the largest N), by towline variant (issue 29);
`extra events` is a difference (history events per step beyond the bare loop's), not a ratio."""


@dataclass
class Sample:
    """One measured run (or batch of concurrent runs) of one variant."""

    wall: float
    worker_cpu: float
    server_cpu: float
    history_bytes: int = 0
    events: int = 0
    executions: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    payloads: dict[str, list[int]] = field(default_factory=dict[str, list[int]])
    by_event: dict[str, int] = field(default_factory=dict[str, int])
    by_part: dict[str, int] = field(default_factory=dict[str, int])
    """History bytes by event type and part (`histories.part_bytes`)."""
    steps: int = 0
    """Tool steps of all the runs measured."""
    actions: ActionCount = field(default_factory=ActionCount)
    """Billable Actions of all the runs: from their histories, and the heartbeats the
    worker counted (`towline.telemetry.actions`)."""

    @property
    def actions_per_step(self) -> float:
        return self.actions.total / self.steps if self.steps else 0.0


class Bench:
    """The server, the workers, and a client of each."""

    def __init__(self, server: DevServerProcess, workers: dict[str, WorkerProcess],
                 clients: dict[str, Client]) -> None:
        self.server, self.workers, self.clients = server, workers, clients

    async def _start(self, variant: str, steps: int) -> tuple[str, Awaitable[Any]]:
        wid = f"{variant}-{steps}-{uuid.uuid4().hex[:8]}"
        kind = "towline" if variant == "long" else variant  # the long run's agent is towline's
        handle = await start_bench_run(self.clients[variant], kind, steps, id=wid,
                                       task_queue=self.workers[variant].task_queue)
        return wid, handle.result()

    async def measure(self, variant: str, steps: int, runs: int = 1) -> Sample:
        """`runs` runs of `steps` steps started at once; wall and CPU cover all of them."""
        worker, server = self.workers[variant].pid, self.server.pid
        beats0 = self.workers[variant].heartbeats()
        cpu0, server0 = cpu_seconds(worker), cpu_seconds(server)
        t0 = time.perf_counter()
        started = [await self._start(variant, steps) for _ in range(runs)]
        results = await asyncio.gather(*(r for _, r in started))
        sample = Sample(wall=time.perf_counter() - t0, worker_cpu=cpu_seconds(worker) - cpu0,
                        server_cpu=cpu_seconds(server) - server0, steps=steps * runs,
                        actions=ActionCount(heartbeats=self.workers[variant].heartbeats() - beats0))
        for result in results:
            check_result(result, steps)
        for wid, _ in started:
            chain = await executions(self.clients[variant], wid)
            sample.actions += billable_actions(e for events in chain for e in events)
            for events in chain:
                sample.history_bytes += sum(e.ByteSize() for e in events)
                sample.events += len(events)
                for kind, sizes in payload_bytes(events).items():
                    sample.payloads.setdefault(kind, []).extend(sizes)
                for kind, size in event_bytes(events).items():
                    sample.by_event[kind] = sample.by_event.get(kind, 0) + size
                for part, size in part_bytes(events).items():
                    sample.by_part[part] = sample.by_part.get(part, 0) + size
            if runs == 1:
                sample.executions = per_execution(chain)
        return sample


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    workers: dict[str, WorkerProcess] = {}
    store_dir = tempfile.mkdtemp(prefix="towline-bench-store-")
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    ablate: tuple[str, ...] = args.ablate
    async with bench_server() as (server, clients):
        try:
            for v in VARIANTS:
                workers[v] = WorkerProcess(
                    v, server.address, f"bench-{v}-{uuid.uuid4().hex[:6]}",
                    ablate=ablate if v in TOWLINE_VARIANTS else (),
                    profile=profile_dir / f"{v}.txt" if profile_dir else None)
            workers["long"] = WorkerProcess(
                "towline", server.address, f"bench-long-{uuid.uuid4().hex[:6]}",
                payload_store=f"file://{store_dir}", ablate=ablate)
            for w in workers.values():
                w.start()
            clients["long"] = await Client.connect(server.address, plugins=[
                TowlinePlugin(payload_store=f"file://{store_dir}")])
            bench = Bench(server, workers, clients)
            for v in VARIANTS:  # warm-up: imports, sandbox, first connections
                await bench.measure(v, 2)
            sizes = [int(s) for s in args.sizes.split(",")]
            samples: dict[str, dict[str, list[Sample]]] = {}
            for r in range(args.repeats):
                order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                for n in sizes:
                    for v in order:
                        samples.setdefault(f"n{n}", {}).setdefault(v, []).append(
                            await bench.measure(v, n))
                for v in order:
                    samples.setdefault("concurrent", {}).setdefault(v, []).append(
                        await bench.measure(v, CONCURRENT_STEPS, runs=args.concurrent))
                print(f"repeat {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)
            long = None
            if args.long:
                s = await bench.measure("long", args.long)
                long = {"steps": args.long, "executions": s.executions, "wall": s.wall}
        finally:
            for w in workers.values():
                w.stop()
            shutil.rmtree(store_dir, ignore_errors=True)
    profiles = {v: Profile.read(profile_dir / f"{v}.txt") for v in VARIANTS} if profile_dir else {}
    return report(args, sizes, samples, long, ablate, profiles)


def report(args: argparse.Namespace, sizes: list[int], samples: dict[str, dict[str, list[Sample]]],
           long: dict[str, Any] | None, ablate: tuple[str, ...],
           profiles: dict[str, Profile]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []

    def row(figure: str, group: str, key: Callable[[Sample], float], unit: str,
            goal: str | None = None, difference: bool = False) -> None:
        """One figure: its median per variant, and per towline variant the median of the
        per-repeat ratios towline / bare (or differences, `difference`)."""
        s = samples[group]
        compared: dict[str, float] = {}
        for v in TOWLINE_VARIANTS:
            pairs = zip(s[v], s["bare"], strict=True)
            compared[v] = med([key(t) - key(b) for t, b in pairs] if difference
                              else [key(t) / key(b) for t, b in pairs if key(b) > 0])
        rows.append({"figure": figure, "unit": unit, "difference": difference,
                     "goals": GOALS.get(goal, {}) if goal else {}, "ratios": compared,
                     **{v: med([key(x) for x in s[v]]) for v in VARIANTS}})

    for n in sizes:
        big = n == max(sizes)
        row(f"wall, one run, N={n}", f"n{n}", lambda x: x.wall, "s", "wall" if big else None)
        row(f"worker CPU, N={n}", f"n{n}", lambda x: x.worker_cpu, "s", "cpu" if big else None)
        row(f"server CPU, N={n}", f"n{n}", lambda x: x.server_cpu, "s", "server" if big else None)
        row(f"history bytes, N={n}", f"n{n}", lambda x: x.history_bytes, "B",
            "bytes" if big else None)
        row(f"history events, N={n}", f"n{n}", lambda x: x.events, "n")
        row(f"events per step beyond bare, N={n}", f"n{n}", lambda x: x.events / max(1, x.steps),
            "e", "extra events" if big else None, difference=True)
        row(f"billable Actions per step, N={n}", f"n{n}", lambda x: x.actions_per_step, "a",
            "actions" if big else None)
    label = f"{args.concurrent} concurrent runs of N={CONCURRENT_STEPS}"
    row(f"{label}, wall", "concurrent", lambda x: x.wall, "s", "concurrent")
    row(f"{label}, worker CPU", "concurrent", lambda x: x.worker_cpu, "s")
    row(f"{label}, server CPU", "concurrent", lambda x: x.server_cpu, "s")
    row(f"{label}, Actions/step", "concurrent", lambda x: x.actions_per_step, "a")
    biggest = samples[f"n{max(sizes)}"]
    n = max(sizes)
    payloads = {kind: {v: med([med([float(b) for b in s.payloads.get(kind, [])]) for s in biggest[v]])
                       for v in VARIANTS} for kind in ("model in", "model out", "tool in", "tool out")}
    model_in = biggest["towline"][0].payloads.get("model in", [0])
    kinds = sorted({k for v in VARIANTS for k in biggest[v][0].by_event})
    per_step = {k: {v: biggest[v][0].by_event.get(k, 0) / n for v in VARIANTS} for k in kinds}
    parts = sorted({k for v in VARIANTS for k in biggest[v][0].by_part})
    per_part = {k: {v: biggest[v][0].by_part.get(k, 0) / n for v in VARIANTS} for k in parts}
    result: dict[str, Any] = {
        "repeats": args.repeats, "n": n, "ablate": list(ablate), "rows": rows, "payloads": payloads,
        "model_input": {"first": model_in[0], "last": model_in[-1], "requests": len(model_in),
                        "per_step": (model_in[-1] - model_in[0]) / max(1, len(model_in) - 1)},
        "bytes_per_step_by_event": per_step, "bytes_per_step_by_part": per_part, "long": long,
        "actions": {v: biggest[v][0].actions.to_json() for v in VARIANTS},
    }
    if profiles:
        result["profile"] = {v: {
            "samples": p.samples,
            "top_self": p.self_time.most_common(12),
            "shares": {name: round(p.share(part), 3) for name, part in (
                ("towline workflow code", "towline/workflows/"),
                ("towline activities", "towline/activities/"),
                ("workflow sandbox", "workflow_sandbox/"),
                ("pydantic", "pydantic"),
                ("payload conversion", "converter"),
            )},
        } for v, p in profiles.items()}
    return result


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "B":
        return f"{value / 1024:.1f} KiB"
    if unit in ("a", "e"):
        return f"{value:.2f}"
    return f"{value:.0f}"


def _compared(r: dict[str, Any], v: str) -> str:
    """A towline variant's ratio (or difference) and whether it meets its goal."""
    value = r["ratios"][v]
    text = f"{value:+.2f}" if r["difference"] else f"{value:.2f}x"
    goal = r["goals"].get(v)
    if goal is None:
        return f"{text:>8} {'':>13}"
    bound = f"{goal:+.2f}" if r["difference"] else f"{goal:.2f}x"
    return f"{text:>8} {('<= ' + bound + (' met' if value <= goal else ' NOT')):>13}"


def table(rep: dict[str, Any]) -> str:
    head = (f"towline vs a bare temporalio loop: {rep['repeats']} repeats, alternating order, "
            "medians (ratio: median of the per-repeat towline/bare; `add` as it is in towline, "
            "declared idempotent in towline-idem)")
    head += ablation_note(rep["ablate"])
    lines = [head, "", (f"{'figure':<38} {'bare':>10} {'towline':>10} {'ratio':>8} {'goal':>13} "
                        f"{'towl-idem':>10} {'ratio':>8} {'goal':>13}")]
    for r in rep["rows"]:
        lines.append(f"{r['figure']:<38} {_fmt(r['bare'], r['unit']):>10} "
                     f"{_fmt(r['towline'], r['unit']):>10} {_compared(r, 'towline')} "
                     f"{_fmt(r['towline-idem'], r['unit']):>10} {_compared(r, 'towline-idem')}")
    lines += ["", f"payload bytes per activity, N={rep['n']} (median)"]
    for kind, v in rep["payloads"].items():
        lines.append(f"  {kind:<10} " + "  ".join(f"{name} {v[name]:>6.0f}" for name in VARIANTS))
    m = rep["model_input"]
    lines.append(f"  model input: request 1 {m['first']} B (tool definitions), request "
                 f"{m['requests']} {m['last']} B ({m['per_step']:+.2f} B per request)")
    lines += ["", (f"billable Actions of one run, N={rep['n']} (Temporal Cloud's rules, "
                   "towline/telemetry/actions.py; heartbeats counted by the worker)")]
    for v in VARIANTS:
        counted = ActionCount(**{k: n for k, n in rep["actions"][v].items() if k != "total"})
        lines.append(f"  {v:<12} {counted.line()}")
    lines += ["", f"history bytes per step by event type, N={rep['n']}"]
    for kind, v in sorted(rep["bytes_per_step_by_event"].items(), key=lambda kv: -kv[1]["towline"]):
        if any(v[name] >= 1 for name in VARIANTS):
            lines.append(f"  {kind:<36} " + "  ".join(f"{name} {v[name]:>7.1f}" for name in VARIANTS))
    lines += ["", f"history bytes per step by event type and part, N={rep['n']}"]
    for part, v in sorted(rep["bytes_per_step_by_part"].items(), key=lambda kv: -kv[1]["towline"]):
        if any(v[name] >= 1 for name in VARIANTS):
            lines.append(f"  {part:<50} " + "  ".join(f"{name} {v[name]:>7.1f}" for name in VARIANTS))
    if rep.get("long"):
        long = rep["long"]
        lines += ["", (f"long towline run, {long['steps']} steps, file:// payload store "
                  f"({long['wall']:.0f} s): bytes per step by execution")]
        for i, r in enumerate(long["executions"], 1):
            lines.append(f"  execution {i}: {r['steps']:>5} steps {r['events']:>6} events "
                         f"{r['bytes']:>9} B, start input {r['start_input']:>5} B, "
                         f"{r['bytes_per_step']} B/step")
    for v, p in rep.get("profile", {}).items():
        lines += ["", f"profile of the {v} worker (py-spy, {p['samples']} samples)"]
        lines += [f"  {name}: {share:.0%} of samples" for name, share in p["shares"].items()]
        lines += [f"  {k:>6}  {frame}" for frame, k in p["top_self"]]
    return "\n".join(lines)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each figure")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="steps of single runs")
    parser.add_argument("--concurrent", type=int, default=CONCURRENT,
                        help=f"concurrent runs of N={CONCURRENT_STEPS}")
    parser.add_argument("--long", type=int, default=LONG_STEPS,
                        help="steps of the long towline run (0: none)")
    parser.add_argument("--profile", metavar="DIR", help="record both workers with py-spy into DIR")
    args = parser.parse_args()
    finish(asyncio.run(run_bench(args)), args.json, table)


if __name__ == "__main__":
    main()
