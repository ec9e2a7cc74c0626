"""Which process listens on a loopback port (Linux: the kernel TCP table and `/proc/PID/fd`).

A dev server told to listen on a port another process took in the meantime exits; until it
has, a readiness check that connects to the port gets an answer from the *other* server. The
port's listening socket belongs to the process that bound it, which the kernel tells: its
inode is in the TCP table, and the process holds it among its file descriptors.
"""

from __future__ import annotations

import os
from pathlib import Path

from towline.runtime.tcp_table import tcp_rows, tells

__all__ = ["listens_on"]

_LISTEN = "0A"
"""The table's state of a listening socket."""


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the socket listening on `port`; None where this system
    does not tell (no `/proc`)."""
    fds = Path(f"/proc/{pid}/fd")
    if not tells() or not fds.is_dir():
        return None
    wanted = {f"socket:[{f[9]}]" for f in tcp_rows()
              if f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port}
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
