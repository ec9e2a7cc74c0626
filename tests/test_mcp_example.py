"""The README's MCP example, its commands run as subprocesses exactly as written.

`examples.mcp_files:agent` keeps notes through `examples/files_server.py`, a
filesystem-style MCP server its worker starts over stdio. The second test is the
README's three-terminal scenario: `towline dev`, a slow `towline worker`, and
`towline run ... --no-worker`; the worker is SIGKILLed while the write is under way,
started again, and the run finishes with the write made once more (it is idempotent).
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest
from mcp_helpers import attempts, wait_for
from readme import REPO, cli_env, read_until, readme, readme_process, stop_process
from temporalio.client import Client

from towline.runtime.plugin import TowlinePlugin

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]


async def test_the_notes_agent_saves_and_reads_through_its_mcp_server(target: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    env = cli_env(target, extra={"NOTES_DIR": str(notes)})
    saved = await readme('towline run examples.mcp_files:agent "Save a note called todo.txt: buy milk"',
                         env=env)
    assert saved.code == 0, saved
    assert saved.out == "Saved. The server says: wrote 8 characters to todo.txt.\n"
    shown = re.search(r"```\n(\[step 1\] model calls files_write_file.*?)```",
                      (REPO / "docs" / "mcp.md").read_text(), re.DOTALL)
    assert shown is not None
    for line in shown.group(1).strip().splitlines():  # the docs' progress, as printed
        assert line in saved.err.splitlines()
    assert (notes / "todo.txt").read_text() == "buy milk"

    read = await readme('towline run examples.mcp_files:agent "Read todo.txt"', env=env)
    assert read.code == 0, read
    assert read.out == "It says: buy milk\n"


async def test_a_worker_killed_mid_call_and_restarted_finishes_the_run(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    state.mkdir()
    dev = await readme_process("towline dev", env=cli_env(), cwd=state)
    workers: list[asyncio.subprocess.Process] = []
    try:
        said = await read_until(dev.stderr, "Ctrl-C stops.")
        address = re.search(r"Temporal server\s+(\S+:\d+)", said)
        assert address, said
        notes = tmp_path / "notes"
        env = cli_env(address.group(1), extra={"NOTES_DIR": str(notes)})

        async def start_worker() -> None:
            worker = await readme_process(
                "NOTES_SLOW_SECONDS=5 towline worker --agent examples.mcp_files:agent", env=env)
            workers.append(worker)
            await read_until(worker.stderr, "Ctrl-C stops.")

        await start_worker()
        run = await readme_process(
            'towline run examples.mcp_files:agent "Save a note called plan.txt: ship it" --no-worker',
            env=env)
        # the server writes first, then takes its 5 seconds: the call is under way
        await wait_for(lambda: (notes / "plan.txt").exists(), timeout=90, interval=0.1)
        stop_process(workers[0], signal.SIGKILL)
        await workers[0].wait()
        await start_worker()  # the same command again

        out, err = await asyncio.wait_for(run.communicate(), 120)
        assert run.returncode == 0, err.decode()
        assert out.decode() == "Saved. The server says: wrote 7 characters to plan.txt.\n"
        workflow_id = re.search(r"Run (\S+) started", err.decode())
        assert workflow_id is not None
        client = await Client.connect(address.group(1), plugins=[TowlinePlugin()])
        history = await client.get_workflow_handle(workflow_id.group(1)).fetch_history()
        assert attempts(history, "towline.tool.files_write_file") == [2]
    finally:
        for worker in workers:
            stop_process(worker, signal.SIGKILL)
            await worker.wait()
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 60)
