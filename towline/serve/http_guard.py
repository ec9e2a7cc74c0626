"""Who may call towline's HTTP servers: the codec server and `towline mcp-serve --http`.

Both listen on 127.0.0.1 by default. That keeps other machines out, not web pages: any
page can make a browser send requests to 127.0.0.1, and with DNS rebinding (its own name
re-resolved to 127.0.0.1) read the answers as if it were same-origin. Such a request
still carries the page's name in its `Host` header, so a server that answers only the
names it is reached by — localhost, the host it binds, and the names it was given —
refuses it (`HostCheck`, 421 like the MCP SDK's own check). A bearer token
(`bearer_matches`) keeps out whoever reaches the port without it: other users of the
machine, or other machines when the server binds a wider interface.

`GuardedApp` applies both to an ASGI application (the MCP server's); the codec server,
a plain `http.server`, calls `HostCheck.allows` itself.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["LOCAL_NAMES", "ANY_HOST", "HostCheck", "bearer_matches", "GuardedApp"]

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
"""Names a loopback server is always reached by."""
ANY_HOST = "*"
"""An allowed name that turns the check off (behind a proxy that checks `Host` itself)."""
_WILDCARDS = ("", "0.0.0.0", "::")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(value: str | None) -> str | None:
    """The name in a `Host` header (`name`, `name:port`, `[v6]:port`), lower-case, or None."""
    if not value:
        return None
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or not (value[end + 1:] == "" or value[end + 1:].startswith(":")):
            return None
        name = value[1:end]
    else:
        name, _, port = value.partition(":")
        if ":" in port:
            return None  # a bare IPv6 address: not a valid Host header
    return name.rstrip(".") or None


@dataclass(frozen=True)
class HostCheck:
    """The `Host` names a server answers to."""

    names: frozenset[str]
    """Lower-case host names and addresses (IPv6 without brackets)."""
    any_host: bool = False
    """Whether every name is allowed (`ANY_HOST` was given)."""

    @classmethod
    def serving(cls, bind_host: str, allowed: Iterable[str] = ()) -> HostCheck:
        """The names of a server bound to `bind_host`: localhost's, that host unless it is a
        wildcard (`0.0.0.0`, `::`), and `allowed` (`*` allows any)."""
        names: set[str] = set(LOCAL_NAMES)
        extra = [bind_host] if bind_host.strip() not in _WILDCARDS else []
        any_host = False
        for item in [*extra, *allowed]:
            if item.strip() == ANY_HOST:
                any_host = True
                continue
            name = host_name(item if not _bare_ipv6(item) else f"[{item.strip()}]")
            if name:
                names.add(name)
        return cls(frozenset(names), any_host)

    def allows(self, host_header: str | None) -> bool:
        """Whether a request with this `Host` header is addressed to this server."""
        if self.any_host:
            return True
        name = host_name(host_header)
        return name is not None and name in self.names

    def allows_origin(self, origin: str | None, host_header: str | None = None,
                      scheme: str | None = None) -> bool:
        """Whether a browser request from `origin` may call (no `Origin`: not a cross-site page).

        Given the request's `Host` header and scheme, the origin must be the server's own:
        same scheme, host and port (a page on another port of localhost is another site).
        """
        if not origin or self.any_host:
            return True
        try:
            parts = urlsplit(origin.strip())
            name, port = parts.hostname, parts.port
        except ValueError:
            return False
        if name is None or name.rstrip(".") not in self.names:
            return False
        if scheme is not None and parts.scheme != scheme:
            return False
        if host_header is None:
            return True
        default = {"http": 80, "https": 443}.get(parts.scheme)
        return (name.rstrip("."), port or default) == _host_port(host_header, default)


def _host_port(host_header: str, default: int | None) -> tuple[str | None, int | None]:
    """The name and port a `Host` header names (`default` when it gives none)."""
    name = host_name(host_header)
    value = host_header.strip()
    tail = value[value.find("]") + 1:] if value.startswith("[") else value.partition(":")[2]
    tail = tail.removeprefix(":")
    if not tail:
        return name, default
    return (name, int(tail)) if tail.isascii() and tail.isdigit() else (None, None)


def _bare_ipv6(value: str) -> bool:
    return value.count(":") > 1 and not value.strip().startswith("[")


def bearer_matches(header: str | None, token: str) -> bool:
    """Whether an `Authorization` header is `Bearer <token>` (constant-time comparison)."""
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class GuardedApp:
    """An ASGI application answering only requests with an allowed `Host` (and `Origin`),
    and, when `token` is set, `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, hosts: HostCheck, token: str | None = None) -> None:
        self.app = app
        self.hosts = hosts
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            raw: list[tuple[bytes, bytes]] = scope.get("headers") or []
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
            refusal = self.refusal(headers, _scheme(scope))
            if refusal is not None and scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            if refusal is not None:
                await _reply(send, *refusal)
                return
        await self.app(scope, receive, send)

    def refusal(self, headers: dict[str, str], scheme: str | None = None
                ) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        """The status, text and extra headers a request is refused with, or None."""
        if not self.hosts.allows(headers.get("host")):
            return 421, "Invalid Host header", []
        if not self.hosts.allows_origin(headers.get("origin"), headers.get("host"), scheme):
            return 403, "Invalid Origin header", []
        if self.token is not None and not bearer_matches(headers.get("authorization"), self.token):
            return 401, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")]
        return None


def _scheme(scope: Scope) -> str:
    """The scheme a browser used to reach the server (`ws`/`wss` as the page's `http`/`https`)."""
    scheme = str(scope.get("scheme") or "http")
    return {"ws": "http", "wss": "https"}.get(scheme, scheme)


async def _reply(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
