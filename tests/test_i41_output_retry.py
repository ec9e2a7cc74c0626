"""`towline run` follows the event stream (issue 41): an output retry, which is no activity and
no tool call, is an `output_retry` event, so the progress still shows it as `retry: ...`."""

from __future__ import annotations

import os
import uuid

from readme import REPO
from temporalio.client import Client

from tests.cli_helpers import towline
from tests.retry_agent import agent
from towline.client import run_handle
from towline.events import EventType
from towline.testing import towline_worker


async def test_towline_run_shows_an_output_retry_from_the_event_stream(
    client: Client, target: str, namespace: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TOWLINE_"))}
    env.update(TEMPORAL_ADDRESS=target, TEMPORAL_NAMESPACE=namespace,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    wid = f"i41-output-retry-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [agent]) as (tc, queue):
        done = await towline("run", "tests.retry_agent:agent", "Say something", "--id",
                             wid, "--no-worker", "--no-stream", "--task-queue", queue, env=env)
        assert done.code == 0, done
        events = [e async for e in run_handle(tc, wid).events()]
    assert done.out == "second time lucky\n"
    assert "[step 1]   retry: the response was empty; answer with text" in done.err.splitlines(), \
        done.err
    [retry] = [e for e in events if e.type == EventType.OUTPUT_RETRY]
    assert (retry.step, retry.field("message")) == (1, "the response was empty; answer with text")
