"""Scale: R concurrent runs of S steps whose model call takes L ms, towline against a bare loop.

The workload is `bench/loop.py`'s (per step one model activity and one `add` tool
activity, then a final model answer), but every model call first sleeps L ms, standing
in for a provider (towline: a `FunctionModel` that sleeps; the bare loop: its model
activity sleeps). One dev server (in memory) serves every batch; each batch gets fresh
worker processes (1 or 2, on one task queue, with the SDK's and towline's default
worker settings), warms them up with two short runs, then starts R runs at once.

    python bench/scale.py                 # R = 200, 1000; S = 10; L = 200, 1000 ms; 1 and 2 workers
    python bench/scale.py --quick         # R = 10, S = 3, L = 200 ms; 1 and 2 workers (~20 s)
    python bench/scale.py --runs 200 --latency 200 --workers 1 --json
    python bench/scale.py --ablate memo,attrs,mark,facts   # what those cost (experiment)

Figures per batch:
- steps/s: R x S tool steps over the batch's wall time (first start to last result);
- per-step overhead, p50 and p99: a step's wall time minus L, where a step is the time
  from one model call being scheduled to the next (model call, tool call and the workflow
  tasks between), read from the server's event times of up to `--sample` runs;
- worker RSS per 100 live runs: the workers' peak resident memory during the batch minus
  theirs before it, per 100 runs (all R runs are live at once, in the sticky cache);
- server CPU and worker CPU (user + system, all threads) over the batch;
- billable Actions per step (`towline/telemetry/actions.py`) of the sampled runs, heartbeats included.
The ratio lines compare each towline variant's steps/s with the bare loop's at each size
(goal at R = 1000, L = 200 ms: >= 0.90x): `towline` runs `add` as it is (not idempotent),
`towline-idem` with `add` declared idempotent.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import harness
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from towline.telemetry.actions import ActionCount, billable_actions

GOAL_STEPS_PER_S = 0.90
QUICK = {"runs": "10", "steps": 3, "latency": "200", "workers": "1,2", "sample": 10}
FULL = {"runs": "200,1000", "steps": 10, "latency": "200,1000", "workers": "1,2", "sample": 200}
START_CONCURRENCY = 50
"""Start requests in flight at once (the client's own CPU is the limit beyond this)."""


@dataclass
class Batch:
    """The figures of one batch of R concurrent runs."""

    variant: str
    workers: int
    runs: int
    steps: int
    latency_ms: int
    wall: float
    steps_per_s: float
    overhead_p50_ms: float
    overhead_p99_ms: float
    rss_per_100_runs_mib: float
    server_cpu: float
    worker_cpu: float
    actions_per_step: float


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def step_overheads(events: list[HistoryEvent], latency: float) -> list[float]:
    """Each step's wall time minus `latency`, in seconds: between consecutive model calls
    being scheduled (the model call, the tool call and the workflow tasks in between)."""
    times = [e.event_time.ToNanoseconds() / 1e9 for e in events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
             and "model" in e.activity_task_scheduled_event_attributes.activity_type.name]
    return [b - a - latency for a, b in itertools.pairwise(times)]


class Sampler:
    """Polls the workers' resident memory while a batch runs, keeping the peak."""

    def __init__(self, workers: list[harness.WorkerProcess]) -> None:
        self.workers, self.peak, self._stop = workers, 0, asyncio.Event()

    def total(self) -> int:
        return sum(w.rss() for w in self.workers)

    async def run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.total())
            try:
                await asyncio.wait_for(self._stop.wait(), 0.2)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self._stop.set()


async def _start(client: Client, variant: str, queue: str, steps: int,
                 gate: asyncio.Semaphore) -> WorkflowHandle[Any, Any]:
    async with gate:
        return await harness.start_bench_run(client, variant, steps, task_queue=queue,
                                     id=f"scale-{variant}-{uuid.uuid4().hex[:10]}")


async def _check(handle: WorkflowHandle[Any, Any], steps: int) -> None:
    harness.check_result(await handle.result(), steps)


async def batch(server_pid: int, clients: dict[str, Client], address: str, variant: str,
                workers: int, runs: int, steps: int, latency_ms: int, sample: int,
                ablate: tuple[str, ...] = ()) -> Batch:
    """Fresh workers, a warm-up, then `runs` runs of `steps` steps started at once."""
    latency = latency_ms / 1000
    queue = f"scale-{variant}-{uuid.uuid4().hex[:6]}"
    procs = [harness.WorkerProcess(variant, address, queue, latency=latency,
                           ablate=ablate if variant in harness.TOWLINE_VARIANTS else ())
             for _ in range(workers)]
    client = clients[variant]
    try:
        for p in procs:
            p.launch()
        for p in procs:
            p.wait_ready()
        gate = asyncio.Semaphore(START_CONCURRENCY)
        warm = [await _start(client, variant, queue, 1, gate) for _ in range(2 * workers)]
        await asyncio.gather(*(_check(h, 1) for h in warm))
        sampler = Sampler(procs)
        rss0 = sampler.total()
        beats0 = sum(p.heartbeats() for p in procs)
        cpu0, server0 = sum(harness.cpu_seconds(p.pid) for p in procs), harness.cpu_seconds(server_pid)
        sampling = asyncio.create_task(sampler.run())
        t0 = time.perf_counter()
        handles = await asyncio.gather(*(_start(client, variant, queue, steps, gate)
                                         for _ in range(runs)))
        await asyncio.gather(*(_check(h, steps) for h in handles))
        wall = time.perf_counter() - t0
        sampler.stop()
        await sampling
        worker_cpu = sum(harness.cpu_seconds(p.pid) for p in procs) - cpu0
        server_cpu = harness.cpu_seconds(server_pid) - server0
        beats = sum(p.heartbeats() for p in procs) - beats0
    finally:
        for p in procs:
            p.stop()
    chosen = handles[:sample]
    histories = await asyncio.gather(*(h.fetch_history() for h in chosen))
    overheads = [o for h in histories for o in step_overheads(list(h.events), latency)]
    counted = sum((billable_actions(h.events) for h in histories), ActionCount())
    # heartbeats are counted for the whole batch: the sampled runs' share of them
    counted += ActionCount(heartbeats=round(beats * len(chosen) / runs))
    return Batch(
        variant=variant, workers=workers, runs=runs, steps=steps, latency_ms=latency_ms,
        wall=wall, steps_per_s=runs * steps / wall,
        overhead_p50_ms=percentile(overheads, 50) * 1000,
        overhead_p99_ms=percentile(overheads, 99) * 1000,
        rss_per_100_runs_mib=(sampler.peak - rss0) / runs * 100 / 2**20,
        server_cpu=server_cpu, worker_cpu=worker_cpu,
        actions_per_step=counted.total / (len(chosen) * steps),
    )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


async def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    async with harness.bench_server() as (server, clients):
        batches: list[Batch] = []
        variants = [v for v in args.variants.split(",") if v]
        for workers in _ints(args.workers):
            for latency in _ints(args.latency):
                for runs in _ints(args.runs):
                    order = variants if len(batches) % 2 == 0 else variants[::-1]
                    for variant in order:
                        b = await batch(server.pid, clients, server.address, variant, workers,
                                        runs, args.steps, latency, args.sample, args.ablate)
                        batches.append(b)
                        print(f"{variant}: {workers} worker(s), R={runs}, L={latency} ms: "
                              f"{b.steps_per_s:.1f} steps/s", file=sys.stderr, flush=True)
    return {"steps": args.steps, "ablate": list(args.ablate),
            "batches": [asdict(b) for b in batches], "ratios": ratios(batches)}


def ratios(batches: list[Batch]) -> list[dict[str, Any]]:
    """Each towline variant's steps/s over the bare loop's, for each (workers, R, L) both ran."""
    found: list[dict[str, Any]] = []
    by_key = {(b.variant, b.workers, b.runs, b.latency_ms): b for b in batches}
    for (variant, workers, runs, latency), t in by_key.items():
        bare = by_key.get(("bare", workers, runs, latency))
        if variant not in harness.TOWLINE_VARIANTS or bare is None:
            continue
        goal = GOAL_STEPS_PER_S if (runs, latency) == (1000, 200) else None
        found.append({"variant": variant, "workers": workers, "runs": runs,
                      "latency_ms": latency, "goal": goal,
                      "steps_per_s": t.steps_per_s / bare.steps_per_s,
                      "overhead_p50": t.overhead_p50_ms / bare.overhead_p50_ms,
                      "server_cpu": t.server_cpu / bare.server_cpu if bare.server_cpu else None,
                      "actions_per_step": t.actions_per_step / bare.actions_per_step})
    return found


def table(rep: dict[str, Any]) -> str:
    lines = [(f"R concurrent runs of S={rep['steps']} steps, model call L ms "
              "(overhead: step wall time - L; RSS: peak - before, per 100 live runs)"
              + harness.ablation_note(rep.get("ablate", []))), "",
             (f"{'variant':<12} {'wkr':>3} {'R':>5} {'L ms':>5} {'wall s':>7} {'steps/s':>8} "
              f"{'p50 ms':>7} {'p99 ms':>7} {'MiB/100':>8} {'srv CPU':>8} {'wkr CPU':>8} "
              f"{'Act/step':>8}")]
    for b in rep["batches"]:
        lines.append(
            f"{b['variant']:<12} {b['workers']:>3} {b['runs']:>5} {b['latency_ms']:>5} "
            f"{b['wall']:>7.1f} {b['steps_per_s']:>8.1f} {b['overhead_p50_ms']:>7.0f} "
            f"{b['overhead_p99_ms']:>7.0f} {b['rss_per_100_runs_mib']:>8.1f} "
            f"{b['server_cpu']:>7.1f}s {b['worker_cpu']:>7.1f}s {b['actions_per_step']:>8.2f}")
    if rep["ratios"]:
        lines += ["", "towline / bare"]
    for r in rep["ratios"]:
        goal = "" if r["goal"] is None else f"  goal >= {r['goal']:.2f}x " + (
            "met" if r["steps_per_s"] >= r["goal"] else "NOT MET")
        server = f"{r['server_cpu']:.2f}x" if r["server_cpu"] is not None else "-"
        lines.append(f"  {r['variant']:<12} {r['workers']} worker(s), R={r['runs']}, "
                     f"L={r['latency_ms']} ms: steps/s "
                     f"{r['steps_per_s']:.2f}x, overhead p50 {r['overhead_p50']:.2f}x, server CPU "
                     f"{server}, Actions/step {r['actions_per_step']:.2f}x{goal}")
    return "\n".join(lines)


def main() -> None:
    parser = harness.bench_parser(__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="the small preset: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    parser.add_argument("--runs", help=f"R, comma-separated (default {FULL['runs']})")
    parser.add_argument("--steps", type=int, help=f"S (default {FULL['steps']})")
    parser.add_argument("--latency", help=f"L in ms, comma-separated (default {FULL['latency']})")
    parser.add_argument("--workers", help=f"worker processes, comma-separated (default {FULL['workers']})")
    parser.add_argument("--variants", default=",".join(harness.VARIANTS),
                        help="towline (`add` as it is), towline-idem (`add` declared idempotent), bare")
    parser.add_argument("--sample", type=int,
                        help=f"runs per batch whose histories are read (default {FULL['sample']})")
    args = parser.parse_args()
    preset = QUICK if args.quick else FULL
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    unknown = {v for v in args.variants.split(",") if v} - set(harness.VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}")
    harness.finish(asyncio.run(run_bench(args)), args.json, table)


if __name__ == "__main__":
    main()
