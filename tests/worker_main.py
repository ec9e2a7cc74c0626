"""Run a towline worker for the agents of `tests/durable_agents.py` until killed.

    python tests/worker_main.py --address 127.0.0.1:7233 --task-queue Q [--namespace NS]

The crash tests start this as a separate process and SIGKILL it mid-run, so it
does nothing a test relies on at shutdown. It prints `worker polling` once the
worker runs (useful in the test's log when something goes wrong).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from durable_agents import AGENTS
from temporalio.client import Client
from temporalio.worker import Worker

from towline.plugin import TowlinePlugin


async def serve(address: str, namespace: str, task_queue: str) -> None:
    """Connect (retrying while the server is not up yet) and run the worker forever."""
    client = await Client.connect(address, namespace=namespace, plugins=[TowlinePlugin(AGENTS)])
    # A short sticky timeout: after a crash, the run's next workflow task leaves the dead
    # worker's sticky queue for the shared queue quickly (the default is 10 s).
    worker = Worker(
        client, task_queue=task_queue, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1)
    )
    print("worker polling", flush=True)
    await worker.run()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until the process is killed."""
    parser = argparse.ArgumentParser(description="A towline worker for the durability tests.")
    parser.add_argument("--address", required=True, help="host:port of the Temporal server")
    parser.add_argument("--task-queue", required=True, help="the task queue to poll")
    parser.add_argument("--namespace", default="default", help="the Temporal namespace")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.address, args.namespace, args.task_queue))
    return 0


if __name__ == "__main__":
    sys.exit(main())
