"""Chaos: agent runs under a storm of worker SIGKILLs (and server SIGKILLs), then a verdict.

Starts a Temporal dev server (loopback, a free port, a SQLite file), a few worker processes
(`bench/chaos_worker.py`), and N runs of the agents in `bench/chaos_agents.py`: idempotent
and non-idempotent tools, multi-step tool loops, parallel calls, tools that take a second or
two. Every 1-3 s one worker, picked at random, is SIGKILLed and a replacement started; with
`--kill-server` the server is SIGKILLed too (twice by default) and restarted on the same file
and port. After the storm the runs get a bounded drain, then every run is judged:

- its final ledger, read back from the workflow history's memo snapshots
  (`towline.ledger.counters_from_history`), against what its plan must produce
  (`run_step`, `requests`, `tool_calls`, tokens) and its output against the plan's answer;
- every tool effect, counted by idempotency key in files: a non-idempotent tool's effect
  must happen at most once per call, a `succeeded` call's exactly once;
- runs still RUNNING after the drain are stuck.

A run that fails `UncertainToolEffect` is not a mismatch when it is honest: its
non-idempotent tool had entered on a worker that was then lost, so towline cannot know
whether the effect happened and refuses to repeat it. The report counts and explains each.

    python bench/chaos.py                         # 40 runs, 75 s of worker kills
    python bench/chaos.py --kill-server --seed 7  # and two server kills
    python bench/chaos.py --runs 6 --kills 3      # small and quick
    python bench/chaos.py --json                  # the report as JSON

Exit status 0 when every expectation holds (all runs end, 0 mismatches, 0 duplicate
effects, 0 stuck), 1 otherwise. Bounded: storm (`--seconds`) + drain (`--drain`) + setup.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_agents import AGENTS, EFFECTS_ENV, Call, make_plan, plan_prompt
from chaos_report import Kill, Report, RunRecord, analyse
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from towline.client import run_error, start_run
from towline.devserver import DevServerProcess
from towline.ledger import counters_from_history
from towline.plugin import TowlinePlugin
from towline.results import RunResult

__all__ = ["ChaosConfig", "Session", "run_session", "verdict", "run_chaos", "main"]

WORKER_MAIN = Path(__file__).with_name("chaos_worker.py")
_T = TypeVar("_T")


@dataclass(frozen=True)
class ChaosConfig:
    """How much chaos, for how long."""

    runs: int = 40
    """Agent runs to start (the four agents in turn)."""
    seconds: float = 75.0
    """Longest kill storm; it ends sooner once every run has ended (or `kills` are done)."""
    kills: int | None = None
    """Stop the storm after this many worker kills (None: kill until `seconds`)."""
    kill_server: int = 0
    """Server SIGKILLs during the storm, each followed by a restart on the same file and port,
    at random times within 20-70 % of the storm (of its expected length, when `kills` ends it)."""
    workers: int = 2
    """Worker processes alive at once (each kill starts a replacement)."""
    drain: float = 60.0
    """After the storm, how long runs may take to finish before they count as stuck."""
    spread: float = 0.4
    """Runs are started evenly over this fraction of `seconds`, at most one a second
    (0: all at once)."""
    seed: int = 0
    """Seeds the plans, the kill times and the victims."""


class Workers:
    """The worker processes: start them, SIGKILL one at random, replace it."""

    def __init__(self, address: str, namespace: str, task_queue: str, folder: Path) -> None:
        self.command = [sys.executable, str(WORKER_MAIN), "--address", address,
                        "--namespace", namespace, "--task-queue", task_queue]
        self.env = {**os.environ, EFFECTS_ENV: str(folder)}
        self.log = folder / "workers.log"
        self.alive: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Launch one more worker process (its output goes to `workers.log`)."""
        with self.log.open("ab") as log:
            self.alive.append(subprocess.Popen(
                self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT,
            ))

    def kill_one(self, rng: random.Random) -> Kill:
        """SIGKILL a random worker (by its pid), reap it and start a replacement."""
        victim = self.alive.pop(rng.randrange(len(self.alive)))
        kill = Kill(time.time(), "worker", victim.pid)
        if victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        self.start()
        return kill

    def stop(self) -> None:
        """SIGKILL every worker still running (each by its pid)."""
        for p in self.alive:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
        self.alive = []


async def _rpc(call: Callable[[], Awaitable[_T]], patience: float = 60.0) -> _T:
    """`call()`, retried while the server is unreachable (it may be down: the bench kills it)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return await call()
        except RPCError as e:
            transient = e.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
                                     RPCStatusCode.UNKNOWN, RPCStatusCode.CANCELLED,
                                     RPCStatusCode.INTERNAL, RPCStatusCode.RESOURCE_EXHAUSTED)
            if not transient or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


class _Runs:
    """The runs of one chaos session: plans, starts, and which are still open."""

    def __init__(self, client: Client, cfg: ChaosConfig, task_queue: str, rng: random.Random):
        self.client = client
        self.task_queue = task_queue
        names = [a.name for a in AGENTS]
        self.plans: list[tuple[str, str, list[list[Call]]]] = []
        for i in range(cfg.runs):
            agent = names[i % len(names)]
            self.plans.append((f"chaos-{cfg.seed}-{i:03d}-{agent}-{task_queue[-6:]}", agent,
                               make_plan(agent, i, rng)))
        self.handles: dict[str, WorkflowHandle[Any, RunResult]] = {}
        self.open: set[str] = set()
        self.all_started = False

    async def start_all(self, interval: float) -> None:
        for workflow_id, agent, plan in self.plans:
            async def start(wid: str = workflow_id, name: str = agent,
                            p: list[list[Call]] = plan) -> WorkflowHandle[Any, RunResult]:
                try:
                    return await start_run(self.client, name, plan_prompt(p),
                                           task_queue=self.task_queue, id=wid,
                                           id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
                except WorkflowAlreadyStartedError:  # a retried start that had gone through
                    return self.client.get_workflow_handle(wid, result_type=RunResult)

            self.handles[workflow_id] = await _rpc(start)
            self.open.add(workflow_id)
            await asyncio.sleep(interval)
        self.all_started = True

    async def poll(self) -> None:
        """Forget runs that have closed (checked every second, forever)."""
        while True:
            for workflow_id in list(self.open):
                try:
                    desc = await self.handles[workflow_id].describe()
                except (RPCError, RuntimeError):
                    break  # the server is down: try again later
                if desc.status != WorkflowExecutionStatus.RUNNING:
                    self.open.discard(workflow_id)
            await asyncio.sleep(1.0)

    @property
    def done(self) -> bool:
        return self.all_started and not self.open


async def _collect(runs: _Runs, out: Path) -> list[RunRecord]:
    """Each run's status, result or failure and ledger snapshots; stuck runs are terminated.

    Every run's history is saved as `out/histories/<workflow id>.json` (Temporal's JSON
    history format, which `WorkflowHistory.from_json` and the `Replayer` read).
    """
    records: list[RunRecord] = []
    histories = out / "histories"
    histories.mkdir(exist_ok=True)
    for workflow_id, agent, plan in runs.plans:
        handle = runs.handles.get(workflow_id)
        if handle is None:
            records.append(RunRecord(workflow_id, agent, plan, "NOT_STARTED"))
            continue
        desc = await _rpc(handle.describe)
        status = desc.status.name if desc.status is not None else "UNKNOWN"
        history = await _rpc(handle.fetch_history)
        record = RunRecord(workflow_id, agent, plan, status,
                           snapshots=counters_from_history(history.events))
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            record.result = await _rpc(handle.result)
        elif desc.status == WorkflowExecutionStatus.FAILED:
            try:
                await _rpc(handle.result)
            except WorkflowFailureError as e:
                error = run_error(e)
                record.reason, record.message, record.partial = error.reason, str(error), error.partial
        (histories / f"{workflow_id}.json").write_text(history.to_json())
        if desc.status == WorkflowExecutionStatus.RUNNING:
            await _rpc(lambda h=handle: h.terminate("chaos bench: stuck after the drain"))
        records.append(record)
    return records


@dataclass
class Session:
    """What one chaos session left: each run's record, and every kill."""

    records: list[RunRecord]
    kills: list[Kill]
    seconds: float


async def _storm(cfg: ChaosConfig, rng: random.Random, runs: _Runs, workers: Workers,
                 server: DevServerProcess | None, say: Callable[[str], None]) -> list[Kill]:
    """Kill workers (and the server) until the time is up, the kills are done or runs are."""
    kills: list[Kill] = []
    t0 = time.monotonic()
    span = cfg.seconds if cfg.kills is None else min(cfg.seconds, 2.0 * cfg.kills)  # expected
    server_at = sorted(t0 + span * rng.uniform(0.2, 0.7) for _ in range(cfg.kill_server))
    next_kill = t0 + rng.uniform(1, 3)
    while time.monotonic() < t0 + cfg.seconds and not runs.done:
        if cfg.kills is not None and sum(k.what == "worker" for k in kills) >= cfg.kills:
            break
        if server is not None and server_at and time.monotonic() >= server_at[0]:
            server_at.pop(0)
            kills.append(Kill(time.time(), "server", server.pid))
            server.kill()
            say(f"t={time.monotonic() - t0:5.1f}s server SIGKILLed; restarting on the same file")
            await asyncio.sleep(1.0)
            await server.start()
        if time.monotonic() >= next_kill:
            kills.append(workers.kill_one(rng))
            next_kill = time.monotonic() + rng.uniform(1, 3)
            say(f"t={time.monotonic() - t0:5.1f}s worker {kills[-1].pid} SIGKILLed "
                f"({len(runs.open)} runs open)")
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
    server: DevServerProcess | None = None
    if address is None:
        server = DevServerProcess(db_path=out / "temporal.sqlite", log_path=out / "server.log")
        await server.start()
        address = server.address
        say(f"dev server on {address} (pid {server.pid}), state in {out}")
    elif cfg.kill_server:
        raise ValueError("kill_server needs the bench's own server (no address)")
    task_queue = f"chaos-{uuid4().hex[:12]}"
    workers = Workers(address, namespace, task_queue, folder)
    tasks: list[asyncio.Task[None]] = []
    try:
        client = await Client.connect(address, namespace=namespace, plugins=[TowlinePlugin()])
        runs = _Runs(client, cfg, task_queue, rng)
        for _ in range(cfg.workers):
            workers.start()
        interval = min(1.0, cfg.seconds * cfg.spread / max(cfg.runs, 1))
        tasks = [asyncio.create_task(runs.start_all(interval)), asyncio.create_task(runs.poll())]
        say(f"{cfg.runs} runs, {cfg.workers} workers, kills every 1-3 s for up to {cfg.seconds:.0f} s")
        kills = await _storm(cfg, rng, runs, workers, server, say)
        await tasks[0]  # every run is started before the drain begins
        say(f"storm over; draining {len(runs.open)} open runs for up to {cfg.drain:.0f} s")
        drain_end = time.monotonic() + cfg.drain
        while runs.open and time.monotonic() < drain_end:
            await asyncio.sleep(0.5)
        tasks[1].cancel()
        records = await _collect(runs, out)
    finally:
        for task in tasks:
            task.cancel()
        workers.stop()
        if server is not None:
            await server.stop()
    (out / "kills.json").write_text(json.dumps([vars(k) for k in kills], indent=2))
    return Session(records, kills, time.monotonic() - began)


def verdict(session: Session, cfg: ChaosConfig, out: Path) -> Report:
    """Judge a session (see `chaos_report.analyse`); the report is saved as `out/report.json`."""
    report = analyse(session.records, out / "effects", session.kills, cfg.seed)
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
    parser.add_argument("--kill-server", type=int, nargs="?", const=2, default=0, metavar="N",
                        help="SIGKILL the server N times mid-storm and restart it (default N: 2)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--drain", type=float, default=60.0,
                        help="seconds runs may take to end after the storm (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the database, logs and histories (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.workers < 1 or args.seconds <= 0 or args.drain < 0:
        parser.error("--runs and --workers must be >= 1, --seconds > 0, --drain >= 0")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    cfg = ChaosConfig(runs=args.runs, seconds=args.seconds, kills=args.kills,
                      kill_server=args.kill_server, workers=args.workers, drain=args.drain,
                      seed=seed)
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="towline-chaos-"))
    out.mkdir(parents=True, exist_ok=True)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    report = asyncio.run(run_chaos(cfg, out, progress=progress))
    print(json.dumps(report.as_json(), indent=2) if args.json else report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
