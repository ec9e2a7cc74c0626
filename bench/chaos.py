"""Chaos: agent runs under a storm of worker SIGKILLs, a server SIGKILL and a payload store
that goes away and comes back, then a verdict.

Starts a Temporal dev server (loopback, a free port, a SQLite file), three worker processes
(`bench/chaos_worker.py`), a `file://` payload store shared by the bench's client and the
workers (`bench/chaos_store.py`; payloads of 1 KiB or more go there), and N runs of the
agents in `bench/chaos_agents.py`: idempotent and non-idempotent tools, multi-step tool
loops, parallel calls, tools that take a second or two, and large prompts and tool results
(stored payloads). Every 1-3 s one worker, picked at random, is SIGKILLed and a replacement
started. Once in the storm the store becomes unreachable for a few seconds (its directory
unmounted, as it were: every read and write fails) and comes back; workflow tasks, activities
and starts that needed it fail meanwhile and Temporal retries them. Then the server is
SIGKILLed and restarted on the same file and port. After the storm the runs get a bounded
drain, then every run is judged:

- its final ledger, read back from the workflow history
  (`towline.runtime.ledger.counters_from_history`), against what its plan must produce
  (`run_step`, `requests`, `tool_calls`, tokens) and its output against the plan's answer;
- every tool effect, counted by idempotency key in files: a non-idempotent tool's effect
  must happen at most once per call, a `succeeded` call's exactly once;
- runs still RUNNING after the drain are stuck;
- every store reference in every history must lead to its payload, whole.

A run that fails `UncertainToolEffect` is not a mismatch when it is honest: its
non-idempotent tool had entered on a worker that was then lost, so towline cannot know
whether the effect happened and refuses to repeat it. The report counts and explains each.
It is *false* when the tool function never started (no entry in the tools' log): such a run
was lost for nothing, and fails the verdict.

    python bench/chaos.py                         # the issue's profile: 40 runs, 3 workers,
                                                  # 75 s of kills, 1 server kill, 1 store outage
    python bench/chaos.py --kill-server 2 --seed 7  # two server kills
    python bench/chaos.py --kill-server 0 --no-store  # worker kills only
    python bench/chaos.py --runs 6 --kills 3      # small and quick
    python bench/chaos.py --json                  # the report as JSON

Exit status 0 when every expectation holds (all runs complete or fail safe, 0 false
`UncertainToolEffect`, 0 mismatches, 0 duplicate effects, 0 stuck, no stored payload lost),
1 otherwise. Bounded: storm (`--seconds`) + drain (`--drain`) + setup.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_report import Kill, Report, RunRecord, analyse
from chaos_runs import Runs, collect
from chaos_store import THRESHOLD, CountingStore, Outage
from chaos_worker import Workers
from harness import leave
from temporalio.client import Client

from towline.devserver import DevServerProcess
from towline.runtime.plugin import TowlinePlugin

__all__ = ["ChaosConfig", "Session", "run_session", "verdict", "run_chaos", "main"]



@dataclass(frozen=True)
class ChaosConfig:
    """How much chaos, for how long."""

    runs: int = 40
    """Agent runs to start (the agents of `chaos_agents.AGENTS` in turn)."""
    seconds: float = 75.0
    """Longest kill storm; it ends sooner once every run has ended (or `kills` are done)."""
    kills: int | None = None
    """Stop the storm after this many worker kills (None: kill until `seconds`)."""
    kill_server: int = 1
    """Server SIGKILLs during the storm, each followed by a restart on the same file and port,
    at random times within 20-70 % of the storm (of its expected length, when `kills` ends it),
    and never while the store is out."""
    workers: int = 3
    """Worker processes alive at once (each kill starts a replacement)."""
    store: bool = True
    """Give the client and the workers a shared `file://` payload store."""
    store_outages: int = 1
    """Times the store goes away mid-storm (within 10-40 % of it) and comes back."""
    outage: float = 4.0
    """Seconds each store outage lasts."""
    drain: float = 60.0
    """After the storm, how long runs may take to finish before they count as stuck."""
    spread: float = 0.4
    """Runs are started evenly over this fraction of `seconds`, at most one a second
    (0: all at once)."""
    seed: int = 0
    """Seeds the plans, the kill times and the victims."""
    entry_mark: bool = True
    """The non-idempotent tools record their entry before each attempt (`Tool.entry_mark`, the
    default): an Action per call, and a lost attempt that never entered is retried instead of
    ending `unknown`. False measures what dropping the mark costs (false `unknown`s)."""


@dataclass
class Session:
    """What one chaos session left: each run's record, and every kill."""

    records: list[RunRecord]
    kills: list[Kill]
    seconds: float
    store_refusals: int = 0
    """Failed store reads and writes, as the processes logged them."""
    stored_payloads: int = 0
    store_lost: list[str] = field(default_factory=list[str])
    """History references whose payload the store lacks (or holds damaged)."""


async def _storm(cfg: ChaosConfig, rng: random.Random, runs: Runs, workers: Workers,
                 server: DevServerProcess | None, store: Outage | None,
                 say: Callable[[str], None]) -> list[Kill]:
    """Kill workers until the time is up, the kills are done or runs are; meanwhile take the
    store away and back, and kill and restart the server (those happen in any case)."""
    kills: list[Kill] = []
    t0 = time.monotonic()
    span = cfg.seconds if cfg.kills is None else min(cfg.seconds, 2.0 * cfg.kills)  # expected
    outages = sorted(t0 + span * rng.uniform(0.1, 0.4)
                     for _ in range(cfg.store_outages if store is not None else 0))
    outages = [max(t, outages[i - 1] + cfg.outage + 1.0) if i else t for i, t in enumerate(outages)]
    server_at = sorted(t0 + span * rng.uniform(0.2, 0.7) for _ in range(cfg.kill_server))
    back_at: float | None = None
    next_kill = t0 + rng.uniform(1, 3)

    def log(what: str, pid: int, text: str) -> None:
        kills.append(Kill(time.time(), what, pid))
        say(f"t={time.monotonic() - t0:5.1f}s {text} ({len(runs.open)} runs open)")

    while time.monotonic() < t0 + cfg.seconds and not runs.done:
        killed = sum(k.what == "worker" for k in kills)
        if cfg.kills is not None and killed >= cfg.kills and not (
                outages or server_at or back_at is not None):
            break
        now = time.monotonic()
        if store is not None and back_at is None and outages and now >= outages[0]:
            outages.pop(0)
            store.stop()
            back_at = now + cfg.outage
            next_kill = min(next_kill, now + 1.0)  # a worker lost meanwhile: its runs' next
            # workflow tasks replay elsewhere, and must read their stored start input
            log("store-down", 0, f"payload store gone for {cfg.outage:.0f} s")
        if store is not None and back_at is not None and now >= back_at:
            store.start()
            back_at = None
            log("store-up", 0, "payload store back")
        # the server dies apart from an outage, so that each leaves its own mark
        if server is not None and server_at and now >= server_at[0] and back_at is None:
            server_at.pop(0)
            log("server", server.pid, "server SIGKILLed; restarting on the same file")
            server.kill()
            await asyncio.sleep(1.0)
            await server.start()
        if (cfg.kills is None or killed < cfg.kills) and time.monotonic() >= next_kill:
            kill = workers.kill_one(rng)
            next_kill = time.monotonic() + rng.uniform(1, 3)
            log("worker", kill.pid, f"worker {kill.pid} SIGKILLed")
        await asyncio.sleep(0.1)
    return kills


async def run_session(cfg: ChaosConfig, out: Path, *, address: str | None = None,
                      namespace: str = "default",
                      progress: Callable[[str], None] | None = None) -> Session:
    """Run one chaos session and collect its records (logs and histories go under `out`).

    Without `address` the bench starts (and may kill) its own dev server; with one it uses
    that server and never kills it.
    """
    began = time.monotonic()
    say = progress or (lambda _: None)
    rng = random.Random(cfg.seed)
    folder = out / "effects"
    folder.mkdir(parents=True, exist_ok=True)
    store = Outage(out) if cfg.store else None
    server: DevServerProcess | None = None
    if address is None:
        server = DevServerProcess(db_path=out / "temporal.sqlite", log_path=out / "server.log")
        await server.start()
        address = server.address
        say(f"dev server on {address} (pid {server.pid}), state in {out}")
    elif cfg.kill_server:
        raise ValueError("kill_server needs the bench's own server (no address)")
    task_queue = f"chaos-{uuid4().hex[:12]}"
    workers = Workers(address, namespace, task_queue, folder, store.url if store else None,
                      entry_mark=cfg.entry_mark)
    tasks: list[asyncio.Task[None]] = []
    kills: list[Kill] = []
    lost: list[str] = []
    try:
        counting = None if store is None else CountingStore(
            store.url, threshold=THRESHOLD, log=str(folder / "store.log"))
        client = await Client.connect(address, namespace=namespace,
                                      plugins=[TowlinePlugin(payload_store=counting)])
        runs = Runs(client, cfg.runs, cfg.seed, task_queue, rng)
        for _ in range(cfg.workers):
            workers.start()
        await workers.ready(cfg.workers)
        interval = min(1.0, cfg.seconds * cfg.spread / max(cfg.runs, 1))
        tasks = [asyncio.create_task(runs.start_all(interval)), asyncio.create_task(runs.poll())]
        say(f"{cfg.runs} runs, {cfg.workers} workers, kills every 1-3 s for up to "
            f"{cfg.seconds:.0f} s" + (f", store {store.url}" if store else ""))
        kills = await _storm(cfg, rng, runs, workers, server, store, say)
        await tasks[0]  # every run is started before the drain begins
        say(f"storm over; draining {len(runs.open)} open runs for up to {cfg.drain:.0f} s")
        drain_end = time.monotonic() + cfg.drain
        while runs.open and time.monotonic() < drain_end:
            await asyncio.sleep(0.5)
        tasks[1].cancel()
        records = await collect(runs, out, store, lost)
    finally:
        for task in tasks:
            task.cancel()
        if store is not None and store.down:
            store.start()
        workers.stop()
        if server is not None:
            await server.stop()
    (out / "kills.json").write_text(json.dumps([vars(k) for k in kills], indent=2))
    return Session(records, kills, time.monotonic() - began,
                   store_refusals=sum(f["payloads"] for f in store.failures(folder)) if store else 0,
                   stored_payloads=store.files() if store else 0, store_lost=lost)


def verdict(session: Session, cfg: ChaosConfig, out: Path) -> Report:
    """Judge a session (see `chaos_report.analyse`); the report is saved as `out/report.json`."""
    report = analyse(session.records, out / "effects", session.kills, cfg.seed)
    report.workers = cfg.workers
    report.outage_seconds = cfg.outage
    report.store_refusals = session.store_refusals
    report.stored_payloads = session.stored_payloads
    report.store_lost = list(session.store_lost)
    report.seconds = session.seconds
    report.drain_limit = cfg.drain
    report.out = str(out)
    (out / "report.json").write_text(json.dumps(report.as_json(), indent=2))
    return report


async def run_chaos(cfg: ChaosConfig, out: Path, *, address: str | None = None,
                    namespace: str = "default",
                    progress: Callable[[str], None] | None = None) -> Report:
    """One chaos session and its verdict."""
    session = await run_session(cfg, out, address=address, namespace=namespace,
                                progress=progress)
    return verdict(session, cfg, out)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run one chaos session, print the report; 0 if it passed."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="agent runs to start (default 40)")
    parser.add_argument("--seconds", type=float, default=75.0,
                        help="longest storm of worker kills, in seconds (default 75)")
    parser.add_argument("--kills", type=int, default=None,
                        help="stop the storm after this many worker kills")
    parser.add_argument("--kill-server", type=int, nargs="?", const=1, default=1, metavar="N",
                        help="SIGKILL the server N times mid-storm and restart it (default 1; "
                        "0: never)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--no-store", action="store_true",
                        help="no payload store (and so no store outage)")
    parser.add_argument("--store-outages", type=int, default=1,
                        help="times the payload store goes away mid-storm (default 1)")
    parser.add_argument("--outage", type=float, default=4.0,
                        help="seconds each store outage lasts (default 4)")
    parser.add_argument("--drain", type=float, default=60.0,
                        help="seconds runs may take to end after the storm (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the database, logs and histories (default: a new temp dir)")
    parser.add_argument("--no-entry-mark", action="store_true",
                        help="non-idempotent tools record no entry mark (Tool.entry_mark=False)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.workers < 1 or args.seconds <= 0 or args.drain < 0:
        parser.error("--runs and --workers must be >= 1, --seconds > 0, --drain >= 0")
    if args.kill_server < 0 or args.store_outages < 0 or args.outage <= 0:
        parser.error("--kill-server and --store-outages must be >= 0, --outage > 0")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    cfg = ChaosConfig(runs=args.runs, seconds=args.seconds, kills=args.kills,
                      kill_server=args.kill_server, workers=args.workers, drain=args.drain,
                      store=not args.no_store, store_outages=args.store_outages,
                      outage=args.outage, seed=seed, entry_mark=not args.no_entry_mark)
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="towline-chaos-"))
    out.mkdir(parents=True, exist_ok=True)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    report = asyncio.run(run_chaos(cfg, out, progress=progress))
    print(json.dumps(report.as_json(), indent=2) if args.json else report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    leave(main())
