"""Whose is the server listening on a loopback port (Linux: `/proc/net/tcp` and `/proc/PID/fd`).

A dev server told to listen on a port another process took in the meantime exits; until it
has, a readiness check that connects to the port gets an answer from the *other* server. The
port's listening socket belongs to the process that bound it, which the kernel tells: its
inode is in `/proc/net/tcp`, and the process holds it among its file descriptors.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["listens_on"]

_LISTEN = "0A"
"""`/proc/net/tcp`'s state of a listening socket."""


def _inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on `port` (any local address)."""
    inodes: set[str] = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the socket listening on `port`; None where this system
    does not tell (no `/proc`)."""
    fds = Path(f"/proc/{pid}/fd")
    if not Path("/proc/net/tcp").exists() or not fds.is_dir():
        return None
    wanted = {f"socket:[{inode}]" for inode in _inodes(port)}
    if not wanted:
        return False
    try:
        for fd in fds.iterdir():
            try:
                if os.readlink(fd) in wanted:
                    return True
            except OSError:
                continue
    except OSError:
        return None
    return False
