"""Ports for the tests' servers, out of the way of the ports the OS hands out.

`towline.devserver.free_port` asks the OS for an ephemeral port and lets it go. Between that and
the server's bind, whatever asks the OS next may be given the same port: a dev server choosing
its internal ports, a connection's local end. With four test processes starting hundreds of
servers, CI saw it once in 1,200 tests (`bind: address already in use` from a `towline dev`
told `--ui-port`). The tests take their ports from below the OS's ephemeral range instead
(above it where there is no room below), each xdist worker from its own block, so that only a
port this process handed out could be taken, and it hands each out once per turn of its block.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

__all__ = ["free_port"]

_FIRST = 10_000
"""The lowest port handed out: below it live well-known services' ports."""

_BLOCK = 1_400
"""Ports a test process may hand out: a session uses a few hundred."""

_WORKERS = 16
"""The xdist workers that each get a block of their own (beyond, blocks are shared)."""


def _ephemeral() -> tuple[int, int]:
    """The OS's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def _block() -> range:
    """This process's ports: a block of `_BLOCK` by its xdist worker number (gw0, gw1, ...)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _WORKERS if worker.isdigit() else 0
    low, high = _ephemeral()
    start = _FIRST if low - _FIRST >= _WORKERS * _BLOCK else high + 1
    start += index * _BLOCK
    return range(start, min(start + _BLOCK, 65_536))


_OWN = _block()
_START = os.getpid() % len(_OWN)
"""Where in its block this process starts: two sessions at once on one machine differ."""
_NEXT = itertools.cycle([*_OWN[_START:], *_OWN[:_START]])


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and that no other test process hands out."""
    for port in itertools.islice(_NEXT, len(_OWN)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in this test process's block {_OWN}")
