"""A provider rate limit shared by every worker, measured at the provider.

    python bench/rate_limit.py [--workers 3] [--runs 60] [--rps 5]

Starts a dev server (the embedded one's binary and matching options), a fake OpenAI-compatible
provider (`tests/providers/fake_server.py`, spoken to by the official `openai` SDK), and
`--workers` processes of the documented command

    towline worker --agent examples.research:agent --model-queue 'openai:*=openai-models' \
        --model-rps 'openai:*=RPS'

(the research example on `openai:gpt-4.1-mini`, `TOWLINE_MODEL`), then `--runs` runs at once.
Each run makes one model call; the provider records when each request arrives. The report
is the requests per second over time against the limit, the largest count in any 1-second
window, and the rate after the first second (the token bucket's burst).
`tests/test_rate_limits.py` runs a small version of the same (and asserts on it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "providers")]

from fake_server import FakeProvider, Reply  # pyright: ignore[reportMissingImports]
from harness import leave
from openai_replies import completion  # pyright: ignore[reportMissingImports]
from temporalio.client import Client

from towline.client import start_run, with_towline
from towline.devserver import start_dev_server

MODEL = "openai:gpt-4.1-mini"
AGENT = "research"
"""`examples.research:agent`, on `MODEL` when `TOWLINE_MODEL` says so."""
MODEL_QUEUE = "openai-models"
KEY = "sk-bench-rate-limit-0000"


def worker_command(rps: float, only: str | None = None) -> str:
    """The documented `towline worker` command with a shared model-queue rate limit."""
    command = (f"towline worker --agent examples.research:agent --model-queue "
               f"'openai:*={MODEL_QUEUE}' --model-rps 'openai:*={rps:g}'")
    return command + (f" --only {only}" if only else "")


def worker_env(address: str, provider: FakeProvider) -> dict[str, str]:
    """The environment of a worker process: the server, the model, the provider's endpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TOWLINE_"))}
    env.update({"TEMPORAL_ADDRESS": address, "TOWLINE_MODEL": MODEL, "PYTHONHASHSEED": "0",
                "OPENAI_BASE_URL": f"{provider.url}/v1", "OPENAI_API_KEY": KEY,
                "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"})
    return env


def answer_everything(provider: FakeProvider) -> None:
    """Every request gets a short answer (streamed when asked, as the API does)."""
    provider.rules.append(lambda r: Reply(completion("Done.")))


def arrivals(provider: FakeProvider, since: float) -> list[float]:
    """Seconds after `since` at which the provider received each request, in order."""
    return sorted(r.at - since for r in provider.requests)


def max_in_window(times: Sequence[float], window: float = 1.0) -> int:
    """The most requests that arrived within any `window` seconds."""
    best, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] >= window:
            first += 1
        best = max(best, last - first + 1)
    return best


def rate_after_burst(times: Sequence[float], burst: int) -> float:
    """Requests per second after the first `burst` (the token bucket's initial tokens)."""
    rest = times[burst:]
    if len(rest) < 2:
        return 0.0
    return (len(rest) - 1) / (rest[-1] - rest[0])


def per_second(times: Sequence[float]) -> list[int]:
    """Requests that arrived in each second after the first one."""
    if not times:
        return []
    start = times[0]
    counts = [0] * (int(times[-1] - start) + 1)
    for t in times:
        counts[int(t - start)] += 1
    return counts


def report(times: Sequence[float], rps: float, workers: int, runs: int) -> str:
    """The measurement as a Markdown table and a summary line."""
    lines = [(f"{workers} worker processes, {runs} runs, limit {rps:g} requests/s "
             f"(task queue {MODEL_QUEUE!r}), {len(times)} requests at the provider"), "",
             "| second | requests | limit |", "|---:|---:|---:|"]
    lines += [f"| {i} | {n} | {rps:g} |" for i, n in enumerate(per_second(times))]
    lines += ["", (f"max in any 1-s window: {max_in_window(times)}; rate after the first "
              f"{int(rps)} (the bucket's burst): {rate_after_burst(times, int(rps)):.2f}/s; "
              f"mean over the whole: {(len(times) - 1) / (times[-1] - times[0]):.2f}/s")]
    return "\n".join(lines)


async def start_runs(client: Client, runs: int, prefix: str, task_queue: str = "towline") -> list[str]:
    """Start `runs` runs of the research agent at once; their workflow ids."""
    handles = await asyncio.gather(*(
        start_run(client, AGENT, f"Question {i}: what is new?", task_queue=task_queue,
                  id=f"{prefix}-{i}") for i in range(runs)))
    return [h.id for h in handles]


async def warm_up(client: Client, provider: FakeProvider, pause: float = 1.5) -> None:
    """One run through the model queue, then a pause: the server has loaded the queue and set
    its limit, and the token bucket is full again (see `towline.fleet.routing` on a cold queue)."""
    (warm,) = await start_runs(client, 1, f"warm-{time.monotonic_ns()}")
    await client.get_workflow_handle(warm).result()
    await asyncio.sleep(pause)
    provider.requests.clear()


def _ready(process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    seen = b""
    while b"Ctrl-C stops." not in seen:
        line = process.stderr.readline()
        if not line or time.monotonic() > deadline:
            raise RuntimeError(f"a worker did not start:\n{seen.decode(errors='replace')}")
        seen += line


def launch(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A worker process (its own process group, stopped with SIGINT like Ctrl-C)."""
    return subprocess.Popen(["bash", "-c", command], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rps", type=float, default=5.0)
    parser.add_argument("--cold", action="store_true",
                        help="no warm-up run: measure a task queue the server has not loaded yet")
    args = parser.parse_args(argv)
    env = await start_dev_server(db_path=None, ui=False)
    provider = FakeProvider().start()
    answer_everything(provider)
    address = env.client.service_client.config.target_host
    processes = [launch(worker_command(args.rps), worker_env(address, provider))
                 for _ in range(args.workers)]
    try:
        for process in processes:
            await asyncio.to_thread(_ready, process)
        client = with_towline(env.client)
        if not args.cold:
            await warm_up(client, provider)
        since = time.monotonic()
        ids = await start_runs(client, args.runs, "bench-rl")
        await asyncio.gather(*(client.get_workflow_handle(i).result() for i in ids))
        times = arrivals(provider, since)
        print(report(times, args.rps, args.workers, args.runs))
        print("arrivals (s): " + " ".join(f"{t:.2f}" for t in times))
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            process.wait(30)
        provider.stop()
        await env.shutdown()
    return 0


if __name__ == "__main__":
    leave(asyncio.run(main()))
