"""Which host names and addresses name this machine (one home for the fact).

Used where a local address changes what towline does: `towline run` embeds a Temporal server
only for a local address, and a model endpoint on this machine (llama.cpp's server, vLLM,
LM Studio) needs no API key.
"""

from __future__ import annotations

import ipaddress

__all__ = ["LOCAL_HOSTS", "is_local_host"]

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"})
"""The spellings of this machine in an address (the loopback range is recognised as well)."""


def is_local_host(host: str | None) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine:
    `localhost` and its subdomains, the loopback range (127.0.0.0/8, ::1) and 0.0.0.0."""
    if not host:
        return False
    name = host.lower().rstrip(".")
    if name in LOCAL_HOSTS or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified
