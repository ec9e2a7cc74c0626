"""A very long run: 10,000 steps (one tool call each) on the dev server with a file payload store.

The run continues-as-new whenever Temporal suggests it; each execution's history
must stay small and flat: the conversation travels by reference (the model's
input names it with one key, continue-as-new carries it as a stored payload).

    python bench/long_run.py                 # 10,000 steps (about 20 minutes here)
    python bench/long_run.py --steps 2000 --json

Layout as in `bench/loop.py`: the dev server (SQLite in a temporary folder, as
`towline dev` keeps it), a worker process with `--payload-store file://...`
beside the database (the embedded default), this process as the client. Prints
the counters, every execution's steps, events and bytes, and the checks:
counters exact, no execution over 10 MB, the last execution's bytes per step
within 1.2x of the first's.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import WorkerProcess, cpu_seconds, finish, full_collections
from histories import executions, per_execution
from temporalio.client import Client

from towline.devserver import DevServerProcess
from towline.results import RunInput, RunResult
from towline.runtime.plugin import TowlinePlugin

MAX_EXECUTION_BYTES = 10 * 1024 * 1024
FLAT = 1.2


async def long_run(steps: int, can_after_events: int | None) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="towline-long-"))
    store = f"file://{state / 'payloads'}"
    server = DevServerProcess(db_path=state / "temporal.db", log_level="error")
    await server.start()
    worker = WorkerProcess("towline", server.address, f"long-{uuid.uuid4().hex[:6]}",
                           payload_store=store, gc_log=state / "gc.log")
    try:
        worker.start()
        client = await Client.connect(server.address, plugins=[TowlinePlugin(payload_store=store)])
        cpu0, server0, t0 = cpu_seconds(worker.pid), cpu_seconds(server.pid), time.perf_counter()
        handle = await client.start_workflow(
            "AgentRun", RunInput(agent="bench", prompt=str(steps),
                                 continue_as_new_after_events=can_after_events),
            id=f"long-{steps}-{uuid.uuid4().hex[:6]}", task_queue=worker.task_queue,
            result_type=RunResult)
        result = await handle.result()
        wall = time.perf_counter() - t0
        worker_cpu, server_cpu = cpu_seconds(worker.pid) - cpu0, cpu_seconds(server.pid) - server0
        chain = await executions(client, handle.id)
    finally:
        worker.stop()
        await server.stop()
    rows = per_execution(chain)
    stored = [p for p in (state / "payloads").rglob("*") if p.is_file()]
    store_bytes = sum(p.stat().st_size for p in stored)
    pauses = full_collections(state / "gc.log")
    shutil.rmtree(state, ignore_errors=True)
    first, last = rows[0]["bytes_per_step"], rows[-1]["bytes_per_step"]
    counters = result.counters
    return {
        "steps": steps, "wall": wall, "worker_cpu": worker_cpu, "server_cpu": server_cpu,
        "run_step": counters.run_step, "tool_calls": counters.tool_calls,
        "messages": len(result.messages), "executions": rows,
        "max_execution_bytes": max(r["bytes"] for r in rows),
        "last_vs_first_bytes_per_step": round(last / first, 3),
        "store_files": len(stored), "store_bytes": store_bytes,
        "full_collections": len(pauses), "longest_full_collection": max(pauses, default=0.0),
        "checks": {
            "counters exact": (counters.run_step, counters.tool_calls) == (steps + 1, steps),
            "no execution over 10 MB": max(r["bytes"] for r in rows) <= MAX_EXECUTION_BYTES,
            f"last execution's bytes/step within {FLAT}x of the first's": last <= FLAT * first,
        },
    }


def table(r: dict[str, Any]) -> str:
    lines = [
        (f"{r['steps']}-step run on the dev server, file payload store: {r['wall']:.0f} s wall, "
        f"worker CPU {r['worker_cpu']:.0f} s, server CPU {r['server_cpu']:.0f} s"),
        (f"counters: run_step {r['run_step']}, tool_calls {r['tool_calls']}; "
        f"{r['messages']} messages in the result"),
        (f"{len(r['executions'])} executions; largest history {r['max_execution_bytes']} B; "
        f"last/first bytes per step {r['last_vs_first_bytes_per_step']}"),
        f"payload store: {r['store_files']} files, {r['store_bytes']} B",
        (f"worker: {r['full_collections']} full garbage collections, the longest "
         f"{r['longest_full_collection']:.3f} s (the deadlock detector's limit is 2 s)"),
        "",
        f"{'execution':>9} {'steps':>6} {'events':>7} {'bytes':>9} {'start input':>11} {'B/step':>7}",
    ]
    for i, e in enumerate(r["executions"], 1):
        lines.append(f"{i:>9} {e['steps']:>6} {e['events']:>7} {e['bytes']:>9} "
                     f"{e['start_input']:>11} {e['bytes_per_step']!s:>7}")
    lines.append("")
    lines += [f"{'ok' if ok else 'FAILED'}: {name}" for name, ok in r["checks"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--continue-as-new-after-events", type=int, default=None,
                        help="continue-as-new sooner than Temporal suggests (default: when it does)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(long_run(args.steps, args.continue_as_new_after_events))
    finish(report, args.json, table, 0 if all(report["checks"].values()) else 1)


if __name__ == "__main__":
    main()
