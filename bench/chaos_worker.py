"""A worker process of the chaos bench: serves `chaos_agents.AGENTS` until it is SIGKILLed.

    python bench/chaos_worker.py --address 127.0.0.1:7233 --task-queue Q [--namespace NS]

`CHAOS_EFFECTS` names the folder the tools count in. Besides the tools' own logs, every
activity attempt this worker starts is logged to `attempts.log` (workflow id, activity id
and type, attempt, the tool call's label, pid, time), so the bench can tell which worker an attempt was lost with.
The server may be down when this starts (the bench kills it too): connecting is retried.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_agents import AGENTS, EFFECTS_ENV
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from towline.plugin import TowlinePlugin


def _log_attempt(args: Sequence[Any]) -> None:
    info = activity.info()
    tool_args = getattr(args[0], "args", None) if args else None
    label = tool_args.get("label") if isinstance(tool_args, dict) else None
    line = json.dumps({
        "workflow_id": info.workflow_id, "activity_id": info.activity_id,
        "type": info.activity_type, "attempt": info.attempt, "label": label,
        "pid": os.getpid(), "t": time.time(),
    }) + "\n"
    fd = os.open(Path(os.environ[EFFECTS_ENV]) / "attempts.log",
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class _LogAttempts(Interceptor):
    """Logs the start of every activity attempt (before any towline code runs)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                _log_attempt(input.args)
                return await super().execute_activity(input)

        return Inbound(next)


async def _connect(address: str, namespace: str) -> Client:
    while True:
        try:
            return await Client.connect(address, namespace=namespace,
                                        plugins=[TowlinePlugin(AGENTS)])
        except RuntimeError:  # the server is down (the bench killed it): try again
            await asyncio.sleep(0.5)


async def serve(address: str, namespace: str, task_queue: str) -> None:
    """Connect and run the worker until the process is killed."""
    client = await _connect(address, namespace)
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
    args = parser.parse_args(argv)
    asyncio.run(serve(args.address, args.namespace, args.task_queue))
    return 0


if __name__ == "__main__":
    sys.exit(main())
