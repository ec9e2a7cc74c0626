"""Which local user is on the other end of a loopback TCP connection (Linux: `/proc/net/tcp`).

`towline dev --encrypt`'s codec server decrypts for whoever reaches it. A secret in its URL kept
other local users out only as long as they could not read that URL, but the URL is on the
`temporal` child's command line (`ps`) and in its UI's settings (`/api/v1/settings`), which any
local user can read. So the server answers only connections whose client socket belongs to its
own user, which the kernel tells: the client's socket is the line of `/proc/net/tcp` (or
`tcp6`) whose local address is the connection's remote one and whose remote address is the
server's, and that line has the owner's uid.
"""

from __future__ import annotations

import ipaddress
import struct

from towline.runtime.tcp_table import tcp_rows, tells

__all__ = ["peer_uid", "can_tell_peers"]


def can_tell_peers() -> bool:
    """Whether this system tells the owner of a connection's client (Linux's /proc)."""
    return tells()


def _hex(address: str, port: int) -> str:
    """An address as `/proc/net/tcp*` writes it: the address's 32-bit words, each in the
    host's byte order, in hex, then `:` and the port."""
    packed = ipaddress.ip_address(address).packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def peer_uid(server: tuple[str, int], client: tuple[str, int]) -> int | None:
    """The uid owning the client end of the connection `client` -> `server`, or None if it is
    not a local socket (or this system does not tell)."""
    forms = {_address_forms(*client)}
    wanted_remote = _address_forms(*server)
    for fields in tcp_rows():
        if _canon(fields[1]) in forms and _canon(fields[2]) == wanted_remote:
            return int(fields[7])
    return None


def _address_forms(address: str, port: int) -> str:
    """The canonical `/proc` form of an address (an IPv4-mapped IPv6 one as its IPv4)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return _hex(str(ip), port)


def _canon(field: str) -> str:
    """A `/proc` address field, an IPv4-mapped IPv6 one written as its IPv4 form."""
    hexaddr, _, port = field.partition(":")
    if len(hexaddr) == 32 and hexaddr[:16] == "0" * 16 and hexaddr[16:24] == "FFFF0000":
        return f"{hexaddr[24:]}:{port}"
    return f"{hexaddr}:{port}"
