"""A dev server whose port another process took first: never mistaken for ready.

Between the check that a port is free and the server's bind, another process (another
`towline dev`, a test's server) can take it. The new server then exits; before it has, the
port answers — from the *other* server. Readiness is the port's listening socket being the
new server's own, so such a start fails with the reason, and `towline dev` / `towline run`
on their default ports start once more on free ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ports import free_port
from temporalio.testing import WorkflowEnvironment

from towline.cli.common import CliError
from towline.cli.embedded import start_embedded
from towline.devserver import DevServerProcess, PortTaken
from towline.devserver.listeners import listens_on


def _taken(env: WorkflowEnvironment) -> int:
    """The port of the session's server: answering, and not the new server's."""
    return int(env.client.service_client.config.target_host.rsplit(":", 1)[1])


async def test_a_server_on_a_taken_port_is_not_ready(env: WorkflowEnvironment, tmp_path: Path) -> None:
    server = DevServerProcess(db_path=tmp_path / "t.db", port=_taken(env), log_path=tmp_path / "log")
    with pytest.raises(PortTaken, match="address already in use"):
        await server.start()
    assert not server.running


async def test_the_embedded_server_moves_off_a_default_port_taken_meanwhile(
    env: WorkflowEnvironment, tmp_path: Path,
) -> None:
    taken = _taken(env)
    with pytest.raises(CliError, match="address already in use"):  # a port the user asked for
        await start_embedded(tmp_path / "asked", "default", taken, free_port())
    embedded = await start_embedded(tmp_path / "default", "default", taken, free_port(), movable=True)
    try:
        assert embedded.process.port != taken
        # the server that answers is the new one, on its own ports
        assert listens_on(embedded.process.pid, embedded.process.port) is True
        assert embedded.process.ui_port is not None
        assert listens_on(embedded.process.pid, embedded.process.ui_port) is True
    finally:
        await embedded.kill()
