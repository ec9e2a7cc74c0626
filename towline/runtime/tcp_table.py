"""The kernel's table of this machine's TCP sockets (Linux: `/proc/net/tcp` and `tcp6`).

One reader for what towline asks of it: whose end a loopback connection is
(`towline.encryption.peer`) and which process listens on a port
(`towline.devserver.listeners`). Each row is a line's fields: `[1]` the local address,
`[2]` the remote one (hex `ADDR:PORT`), `[3]` the state, `[7]` the owner's uid, `[9]` the inode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

__all__ = ["TCP_TABLES", "tells", "tcp_rows"]

TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def tells() -> bool:
    """Whether this system has the table (Linux's /proc)."""
    return TCP_TABLES[0].exists()


def tcp_rows() -> Iterator[list[str]]:
    """The fields of every socket's line, IPv4 then IPv6 (a table that cannot be read is
    skipped)."""
    for table in TCP_TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9:
                yield fields
