"""Run a towline worker for the agents of `tests/durable_agents.py` until killed.

    python tests/worker_main.py --address 127.0.0.1:7233 --task-queue Q [--namespace NS]
        [--agents module:attr]   (default durable_agents:AGENTS)

The crash tests start this as a separate process and SIGKILL it mid-run, so it
does nothing a test relies on at shutdown. It prints `worker polling` once the
worker runs (useful in the test's log when something goes wrong).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from towline.runtime.plugin import TowlinePlugin


class _DieBefore(Interceptor):
    """SIGKILLs this worker when it starts the named activity, before any of its code runs.

    A crash after Temporal handed the attempt to the worker but before the tool function
    was entered: what a later attempt must be able to tell apart from a crash mid-tool.
    """

    def __init__(self, activity_type: str) -> None:
        self.activity_type = activity_type

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        target = self.activity_type

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                if activity.info().activity_type == target:
                    print(f"dying before {target}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                return await super().execute_activity(input)

        return Inbound(next)


async def serve(address: str, namespace: str, task_queue: str, die_before: str | None,
                agents: str = "durable_agents:AGENTS") -> None:
    """Connect (retrying while the server is not up yet) and run the worker forever."""
    module, _, attr = agents.partition(":")
    served = getattr(importlib.import_module(module), attr)
    client = await Client.connect(address, namespace=namespace, plugins=[TowlinePlugin(served)])
    # A short sticky timeout: after a crash, the run's next workflow task leaves the dead
    # worker's sticky queue for the shared queue quickly (the default is 10 s).
    worker = Worker(
        client, task_queue=task_queue, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        interceptors=[_DieBefore(die_before)] if die_before else [],
    )
    print("worker polling", flush=True)
    await worker.run()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until the process is killed."""
    parser = argparse.ArgumentParser(description="A towline worker for the durability tests.")
    parser.add_argument("--address", required=True, help="host:port of the Temporal server")
    parser.add_argument("--task-queue", required=True, help="the task queue to poll")
    parser.add_argument("--namespace", default="default", help="the Temporal namespace")
    parser.add_argument("--die-before", metavar="ACTIVITY_TYPE",
                        help="SIGKILL this worker when it is about to run this activity")
    parser.add_argument("--agents", default="durable_agents:AGENTS", help="module:attr of the agents")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.address, args.namespace, args.task_queue, args.die_before, args.agents))
    return 0


if __name__ == "__main__":
    sys.exit(main())
