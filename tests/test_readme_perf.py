"""The README's "payload store" and "Performance" commands, run exactly as written.

The store commands run against the session's dev server and `moto`'s S3 server on
loopback (the standard AWS variables point boto at it, as they would at any
S3-compatible endpoint); the benchmark commands run their quick versions.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest
from readme import REPO, cli_env, read_until, readme, readme_process, stop_process
from store_servers import make_s3_bucket, s3_env, s3_keys, s3_server
from temporalio.testing import WorkflowEnvironment

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(600)]


async def test_worker_and_client_share_an_s3_store(
    env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = env.client.service_client.config.target_host
    (tmp_path / "long-prompt.txt").write_text("What is 6 times 7? " + "Please be exact. " * 8000)
    async with s3_server() as s3:
        aws = s3_env(s3.url)
        for name, value in aws.items():
            monkeypatch.setenv(name, value)
        await make_s3_bucket("towline-payloads")
        commands = cli_env(address, extra=aws)
        worker = await readme_process(
            "towline worker --agent examples.calculator:agent --payload-store s3://towline-payloads/runs",
            env=commands, cwd=tmp_path)
        try:
            said = await read_until(worker.stderr, "Ctrl-C stops.")
            assert "payload store s3://towline-payloads/runs" in said
            done = await readme(
                "TOWLINE_PAYLOAD_STORE=s3://towline-payloads/runs towline run "
                "examples.calculator:agent --prompt-file long-prompt.txt --no-worker",
                env=commands, cwd=tmp_path)
            assert done.code == 0, done
            assert done.out == "6 times 7 is 42.\n"
        finally:
            stop_process(worker, signal.SIGTERM)
            await asyncio.wait_for(worker.wait(), 30)
        keys = await s3_keys("towline-payloads")
    # The 136 kB prompt went to the bucket (the client stored it, the worker read it).
    assert keys and all(k.startswith("runs/v0/") for k in keys), keys


async def test_the_benchmarks_run() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    loop = await readme("python bench/loop.py --repeats 1 --sizes 5 --concurrent 4 --long 0",
                        env=env, timeout=400)
    assert loop.code == 0, loop
    for figure in ("wall, one run, N=5", "worker CPU, N=5", "history bytes, N=5",
                   "4 concurrent runs of N=5, wall", "history bytes per step by event type",
                   "billable Actions per step, N=5"):
        assert figure in loop.out, loop.out
    # the bare loop's run of 5 steps: its start and 11 activities, nothing else
    assert re.search(r"bare +12 billable \(workflow 1, activities 11\)", loop.out), loop.out
    scale = await readme("python bench/scale.py --quick", env=env, timeout=300)
    assert scale.code == 0, scale
    for workers in (1, 2):
        for variant in ("towline", "bare"):  # a row per variant and worker count, R=10, L=200 ms
            assert re.search(rf"^{variant} +{workers} +10 +200 ", scale.out, re.MULTILINE), scale.out
        assert f"{workers} worker(s), R=10, L=200 ms: steps/s" in scale.out
    cache = await readme("python bench/prompt_cache.py", env=env, timeout=120)
    assert cache.code == 0, cache
    saved = re.search(r"caching saves (\d+)% of the run's cost", cache.out)
    assert saved and int(saved.group(1)) > 50, cache.out  # each step reads the last from cache
    long = await readme("python bench/long_run.py --steps 60", env=env, timeout=400)
    assert long.code == 0, long
    assert "counters: run_step 61, tool_calls 60" in long.out
    assert "FAILED" not in long.out and "ok: no execution over 10 MB" in long.out
    assert "full garbage collections, the longest" in long.out  # the worker logged them
