"""A worker process of the chaos bench: serves `chaos_agents.AGENTS` until it is SIGKILLed.

`Workers` is the bench's side: it starts these processes, SIGKILLs one and replaces it.

    python bench/chaos_worker.py --address 127.0.0.1:7233 --task-queue Q [--namespace NS]
                                 [--store file://DIR]

`CHAOS_EFFECTS` names the folder the tools count in. Besides the tools' own logs, every
activity attempt this worker starts is logged to `attempts.log` (workflow id, activity id
and type, attempt, the tool call's label, pid, time), so the bench can tell which worker an attempt was lost with.
With `--store` the worker's large payloads go to that `file://` store, shared with the bench's
client (`chaos_store.CountingStore`: failed store operations go to `store.log`).
The server may be down when this starts (the bench kills it too): connecting is retried.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_agents import AGENTS, EFFECTS_ENV, ENTRY_MARK_ENV
from chaos_report import Kill
from chaos_store import THRESHOLD, CountingStore, append_log
from harness import leave
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from towline.runtime.plugin import TowlinePlugin

__all__ = ["Workers", "serve", "main"]


class Workers:
    """The worker processes: start them, SIGKILL one at random, replace it."""

    def __init__(self, address: str, namespace: str, task_queue: str, folder: Path,
                 store: str | None = None, entry_mark: bool = True) -> None:
        self.command = [sys.executable, str(Path(__file__).resolve()), "--address", address,
                        "--namespace", namespace, "--task-queue", task_queue]
        if store is not None:
            self.command += ["--store", store]
        self.env = {**os.environ, EFFECTS_ENV: str(folder), ENTRY_MARK_ENV: "" if entry_mark else "1"}
        self.log = folder / "workers.log"
        self.alive: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Launch one more worker process (its output goes to `workers.log`)."""
        with self.log.open("ab") as log:
            self.alive.append(subprocess.Popen(
                self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT,
            ))

    async def ready(self, count: int, patience: float = 60.0) -> None:
        """Wait until `count` workers have said they poll (in `workers.log`), so that the
        storm kills workers at work, not ones still importing."""
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            if self.log.exists() and self.log.read_text().count(" polling\n") >= count:
                return
            await asyncio.sleep(0.2)

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


def _log_attempt(args: Sequence[Any]) -> None:
    info = activity.info()
    tool_args = getattr(args[0], "args", None) if args else None
    label = tool_args.get("label") if isinstance(tool_args, dict) else None
    append_log(Path(os.environ[EFFECTS_ENV]) / "attempts.log", {
        "workflow_id": info.workflow_id, "activity_id": info.activity_id,
        "type": info.activity_type, "attempt": info.attempt, "label": label,
        "pid": os.getpid(), "t": time.time(),
    })


class _LogAttempts(Interceptor):
    """Logs the start of every activity attempt (before any towline code runs)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                _log_attempt(input.args)
                return await super().execute_activity(input)

        return Inbound(next)


async def _connect(address: str, namespace: str, store: str | None) -> Client:
    counting = None if store is None else CountingStore(
        store, threshold=THRESHOLD, log=str(Path(os.environ[EFFECTS_ENV]) / "store.log"))
    while True:
        try:
            return await Client.connect(address, namespace=namespace,
                                        plugins=[TowlinePlugin(AGENTS, payload_store=counting)])
        except RuntimeError:  # the server is down (the bench killed it): try again
            await asyncio.sleep(0.5)


async def serve(address: str, namespace: str, task_queue: str, store: str | None = None) -> None:
    """Connect and run the worker until the process is killed."""
    client = await _connect(address, namespace, store)
    # A short sticky timeout: after a crash a run's next workflow task leaves the dead
    # worker's sticky queue for the shared one within a second (the default is 10 s).
    worker = Worker(client, task_queue=task_queue, interceptors=[_LogAttempts()],
                    sticky_queue_schedule_to_start_timeout=timedelta(seconds=1))
    print(f"worker {os.getpid()} polling", flush=True)
    await worker.run()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until killed."""
    parser = argparse.ArgumentParser(description="A worker of the chaos bench.")
    parser.add_argument("--address", required=True, help="host:port of the Temporal server")
    parser.add_argument("--task-queue", required=True, help="the task queue to poll")
    parser.add_argument("--namespace", default="default", help="the Temporal namespace")
    parser.add_argument("--store", default=None, help="the payload store's file:// URL")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.address, args.namespace, args.task_queue, args.store))
    return 0


if __name__ == "__main__":
    leave(main())
