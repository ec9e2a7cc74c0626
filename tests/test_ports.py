"""The tests' ports: outside the OS's ephemeral range, one block per xdist worker."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import ports

HERE = Path(__file__).parent


def test_ports_are_free_and_outside_the_ephemeral_range() -> None:
    low, high = ports._ephemeral()  # pyright: ignore[reportPrivateUsage]
    handed = [ports.free_port() for _ in range(50)]
    assert len(set(handed)) == 50
    for port in handed:
        assert not low <= port <= high
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_taken_meanwhile_is_not_handed_out() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports.free_port()))
        taken = held.getsockname()[1]
        handed = {ports.free_port() for _ in range(ports._BLOCK + 5)}  # pyright: ignore[reportPrivateUsage]
        assert taken not in handed


def _block_of(worker: str) -> set[int]:
    out = subprocess.run([sys.executable, "-c", "import ports; b = ports._block(); print(b.start, b.stop)"],
                         env={"PYTEST_XDIST_WORKER": worker, "PYTHONPATH": str(HERE)},
                         capture_output=True, text=True, check=True).stdout.split()
    return set(range(int(out[0]), int(out[1])))


def test_each_worker_hands_out_its_own_block() -> None:
    blocks = [_block_of(f"gw{i}") for i in range(6)]
    for i, block in enumerate(blocks):
        assert len(block) == ports._BLOCK  # pyright: ignore[reportPrivateUsage]
        for other in blocks[i + 1:]:
            assert not block & other
