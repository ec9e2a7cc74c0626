"""`towline dev` owns its state folder, and its Temporal server never outlives it.

A SIGKILLed `towline dev` used to leave its `temporal server` child holding the
ports, and the next `towline dev` started a second server on the same SQLite file.
Now the folder is locked (a second server is refused, naming the holder), and the
server child is killed with its parent.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
from cli_helpers import alive, towline_process
from ports import free_port
from readme import REPO, cli_env, read_until

from towline.cli.common import port_free

pytestmark = pytest.mark.timeout(120)


async def _dev(state: Path, port: int) -> asyncio.subprocess.Process:
    return await towline_process("dev", "--state-dir", str(state), "--port", str(port),
                                 "--ui-port", str(free_port()), cwd=REPO, env=cli_env())


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc to find the child")
async def test_second_dev_on_a_folder_is_refused_and_a_killed_dev_takes_its_server_along(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    port = free_port()
    first = await _dev(state, port)
    try:
        await read_until(first.stderr, "Ctrl-C stops.")
        [server] = _children(first.pid)

        second = await _dev(state, free_port())
        _, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 1, err
        assert err.decode().strip() == (
            f"towline: error: the state folder {state} is in use by pid {first.pid}; "
            "stop it first (or give another --state-dir)"
        )

        first.send_signal(signal.SIGKILL)
        await first.wait()
        for _ in range(100):
            if not alive(server):
                break
            await asyncio.sleep(0.1)
        assert not alive(server), "the Temporal server outlived its towline dev"
        for _ in range(100):
            if port_free(port):
                break
            await asyncio.sleep(0.1)
        assert port_free(port)
    finally:
        if first.returncode is None:
            first.send_signal(signal.SIGKILL)
            await first.wait()

    third = await _dev(state, port)  # the lock died with its holder: the folder is free
    try:
        said = await read_until(third.stderr, "Ctrl-C stops.")
        assert f"Temporal server  127.0.0.1:{port}" in said
    finally:
        third.send_signal(signal.SIGINT)
        await asyncio.wait_for(third.wait(), 60)
    assert third.returncode == 0
