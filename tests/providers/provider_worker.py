"""A worker process for the provider tests that kill workers: serves `HEARTBEAT_AGENT` and
`BACKGROUND_AGENT` until killed.

    python tests/providers/provider_worker.py --address HOST:PORT --task-queue Q [--namespace NS]

The model's endpoint and key come from the environment (`OPENAI_BASE_URL`,
`OPENAI_API_KEY`), as on any worker.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

from towline import Agent, ModelSettings, WebSearch
from towline.runtime.plugin import TowlinePlugin

HEARTBEAT_AGENT = Agent(
    name="prov-heartbeat", model="openai:gpt-4.1-mini",
    model_timeout=timedelta(minutes=10),  # a lost worker must be noticed long before this
    model_heartbeat_timeout=timedelta(seconds=4),
    model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5),
)

BACKGROUND_AGENT = Agent(
    name="prov-background", model="openai-responses:o3-deep-research",
    settings=ModelSettings(background=True), native_tools=[WebSearch()],
    model_poll_interval=timedelta(milliseconds=300), model_poll_max_interval=timedelta(milliseconds=600),
    model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5),
)
"""A deep-research agent whose model call runs in the background (polled every 0.3-0.6 s)."""


async def serve(address: str, namespace: str, task_queue: str) -> None:
    client = await Client.connect(address, namespace=namespace,
                                  plugins=[TowlinePlugin([HEARTBEAT_AGENT, BACKGROUND_AGENT])])
    worker = Worker(client, task_queue=task_queue,
                    sticky_queue_schedule_to_start_timeout=timedelta(seconds=1))
    print("worker polling", flush=True)
    await worker.run()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.namespace, args.task_queue))
    return 0


if __name__ == "__main__":
    sys.exit(main())
