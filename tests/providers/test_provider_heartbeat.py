"""The model activity heartbeats while the provider thinks: when its worker dies mid-request,
Temporal notices after the heartbeat timeout (seconds), not the start-to-close timeout
(minutes), and another worker makes the request again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from fake_server import FakeProvider, Reply
from forkserver import ForkedPopen, script_process
from openai_replies import completion
from provider_helpers import KEY, model_attempts
from provider_worker import HEARTBEAT_AGENT
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client

from towline.client import start_run
from towline.runtime.plugin import TowlinePlugin

WORKER = Path(__file__).resolve().parent / "provider_worker.py"

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def spawn(
    provider: FakeProvider, target: str, namespace: str, tmp_path: Path
) -> Iterator[Callable[[str], subprocess.Popen[bytes] | ForkedPopen]]:
    """Start worker processes (killed at the end) pointed at the fake provider."""
    made: list[subprocess.Popen[bytes] | ForkedPopen] = []
    log = tmp_path / "workers.log"

    def start(queue: str) -> subprocess.Popen[bytes] | ForkedPopen:
        env = {**os.environ, "OPENAI_BASE_URL": f"{provider.url}/v1", "OPENAI_API_KEY": KEY}
        with log.open("ab") as out:
            process = script_process(WORKER, ["--address", target, "--namespace", namespace,
                                              "--task-queue", queue], env=env,
                                     cwd=Path.cwd(), output=out.fileno())
        made.append(process)
        return process

    yield start
    for process in made:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
    if log.exists():
        print(log.read_text(errors="replace")[-5000:])


async def test_a_killed_worker_is_noticed_by_the_heartbeat_timeout(
    provider: FakeProvider, target: str, namespace: str,
    spawn: Callable[[str], subprocess.Popen[bytes] | ForkedPopen],
) -> None:
    start = spawn
    # The first worker dies waiting; later attempts are answered (more than one may come on
    # a very loaded machine, where the second worker's own heartbeats can be late too).
    provider.script(Reply(completion("too late"), delay=60),
                    *[Reply(completion("answered by the second worker")) for _ in range(4)])
    queue = f"prov-heartbeat-{uuid4().hex[:8]}"
    client = await Client.connect(target, namespace=namespace, plugins=[TowlinePlugin()])
    first = start(queue)
    handle = await start_run(client, HEARTBEAT_AGENT.name, "hi", task_queue=queue)
    async with asyncio.timeout(30):
        while not provider.requests:
            await asyncio.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    start(queue)
    result = await handle.result()

    assert result.output == "answered by the second worker"
    assert len(provider.requests) >= 2
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    # a later attempt started because the first stopped heartbeating (long before the
    # 10-minute start-to-close timeout: the test's own limit is 90 s)
    assert attempt["attempt"] >= 2
    assert attempt["timeout_type"] == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
