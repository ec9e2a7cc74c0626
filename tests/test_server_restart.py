"""The Temporal server itself is SIGKILLed mid-run and restarted on the same SQLite file.

A dedicated dev server (`towline.devserver.DevServerProcess`) persists to a file
in the test's temporary directory. A run's slow, idempotent tool is working
when the server dies; the server comes back on the same file and port, the
worker reconnects on its own, and the run completes with every tool call's
effect applied exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from durable_agents import (
    EFFECTS_ENV,
    SLOW_ENV,
    call_keys,
    crash_tool_agent,
    effects,
    executions,
    model_attempts,
    wait_for_file,
)
from ports import free_port
from temporalio.client import Client

from towline.client import start_run
from towline.devserver import DevServerProcess
from towline.testing import towline_worker

pytestmark = pytest.mark.timeout(120)


async def test_server_killed_mid_run_and_restarted_on_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "effects"
    monkeypatch.setenv(EFFECTS_ENV, str(root))
    # The tool outlives the server's downtime: its completion reaches the restarted server
    # (or, if the attempt timed out meanwhile, the retry finds the effect applied).
    monkeypatch.setenv(SLOW_ENV, "5")
    db = tmp_path / "temporal.sqlite"
    server = DevServerProcess(db_path=db, port=free_port())
    await server.start()
    try:
        client = await Client.connect(server.address)
        async with towline_worker(client, [crash_tool_agent]) as (tclient, queue):
            handle = await start_run(tclient, crash_tool_agent, "go", task_queue=queue)
            await wait_for_file(root / "started")
            server.kill()
            assert not server.running
            await server.start()  # same file, same port
            result = await handle.result()
    finally:
        server.kill()
        print(server.log_path.read_text(errors="replace")[-3000:])

    assert result.output == "recorded first | slow second done"
    before, slow = call_keys(result)
    assert effects(root) == {before: 1, slow: 1}
    assert executions(root)[before] == 1
    assert model_attempts(root, handle.id) == {1: 1, 2: 1, 3: 1}
    assert (result.counters.run_step, result.counters.tool_calls) == (3, 2)
    assert db.stat().st_size > 0
