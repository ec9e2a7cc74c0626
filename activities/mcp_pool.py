"""The worker's connections to MCP servers: one per server, reused, re-opened when lost.

The `mcp` SDK's `Client` is an async context manager whose transport runs in task
groups that must be entered and left by one task, so each connection is owned by a
background task that opens it, parks until the connection is closed, and records
how it ended. Activities borrow the open `Client` from any task; a connection whose
transport ended (a stdio server that exited, an HTTP server that refused the
connection) is dropped and the next borrower opens a fresh one — that is how a
restarted server is picked up.

The pool also tells a call's activity whether a failed request can have reached the
server: a connection that ended because the TCP connection was refused, or whose
stream had ended before the request was written, never delivered it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Self, cast

from towline.errors import ConfigurationError
from towline.mcp import MCPServer, expand_env

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["MCPPool", "MCPConnection", "ConnectFailed", "sdk"]

_CLOSE_TIMEOUT = 5.0
"""Seconds a closing connection gets to shut its server down before its task is cancelled."""
_PROBE_TIMEOUT = 10.0
"""Seconds a liveness probe of a reused connection may take."""


class ConnectFailed(Exception):
    """The server could not be reached or did not complete the handshake (nothing was sent)."""


def sdk() -> Any:
    """The `mcp` package, or a clear error naming the extra to install."""
    try:
        import mcp
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ConnectFailed("MCP servers need the mcp SDK: pip install 'towline[mcp]'") from e
    return mcp


class _Watched:
    """A transport's read stream that records when it ends (the server went away)."""

    def __init__(self, inner: Any, conn: MCPConnection) -> None:
        self._inner = inner
        self._conn = conn

    @property
    def last_context(self) -> Any:
        """The sender's context snapshot, when the inner stream carries one."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        import anyio

        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._conn.ended = True
            raise

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._conn.ended = True
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def _transport(server: MCPServer, conn: MCPConnection) -> AsyncGenerator[tuple[Any, Any]]:
    """The SDK's stdio or streamable-HTTP transport, its read stream watched."""
    if server.command is not None:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=_expand(server.command), args=[_expand(a) for a in server.args],
            env={k: _expand(v) for k, v in server.env.items()} or None,
            cwd=_expand(server.cwd) if server.cwd is not None else None,
        )
        async with stdio_client(params) as (read, write):
            yield _Watched(read, conn), write
        return
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client  # pyright: ignore[reportPrivateUsage]

    assert server.url is not None
    http = create_mcp_http_client(headers={k: _expand(v) for k, v in server.headers.items()} or None)
    async with http, streamable_http_client(_expand(server.url), http_client=http) as (read, write):
        yield _Watched(read, conn), write


def _expand(value: str) -> str:
    """`${NAME}` / `${NAME:-default}` from this worker's environment."""
    try:
        return expand_env(value, os.environ)
    except ConfigurationError as e:
        raise ConnectFailed(str(e)) from None


def _refused(error: BaseException | None) -> bool:
    """Whether a transport ended only because it could not connect (nothing was delivered)."""
    if error is None:
        return False
    if isinstance(error, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], error)
        return bool(group.exceptions) and all(_refused(e) for e in group.exceptions)
    if isinstance(error, ConnectionRefusedError):
        return True
    return type(error).__name__ in ("ConnectError", "ConnectTimeout") or _refused(error.__cause__)


class MCPConnection:
    """One open `Client` of one server, owned by a background task."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.client: Client | None = None
        self.ended = False
        """The transport's stream ended: the server went away."""
        self.error: BaseException | None = None
        """How the connection ended, if it did with an error."""
        self.loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        """Open, not ended, and usable from the running event loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return self.client is not None and not self.ended and not self._done.is_set() and loop is self.loop

    async def open(self) -> None:
        """Start the server (stdio) or connect (HTTP) and complete the handshake."""
        self._task = asyncio.create_task(self._own(), name=f"towline-mcp-{self.server.name}")
        timeout = self.server.connect_timeout.total_seconds()
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=timeout)
        except TimeoutError:
            await self.aclose()
            raise ConnectFailed(f"no MCP handshake within {timeout:g}s") from None
        if self.client is None:
            error = self.error
            raise ConnectFailed(_describe(error) if error else "the connection closed") from error

    async def _own(self) -> None:
        mcp = sdk()
        try:
            async with mcp.Client(_transport(self.server, self), cache=None,
                                  client_info=mcp.Implementation(name="towline", version="1")) as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - recorded: the borrower decides what it means
            self.error = e
        finally:
            self.ended = True
            self._ready.set()
            self._done.set()

    async def wait_ended(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the connection's task to finish."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), timeout=timeout)
        return self._done.is_set()

    async def probe(self) -> bool:
        """Whether the server answers now: a request without effect (`server/discover` on
        2026-era connections, `ping` on older ones)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if not self.alive or self.client is None:
            return False
        session = self.client.session
        version = session.protocol_version
        try:
            if version in MODERN_PROTOCOL_VERSIONS:
                await asyncio.wait_for(session.send_discover(version), _PROBE_TIMEOUT)
            else:
                await asyncio.wait_for(session.send_ping(), _PROBE_TIMEOUT)
        except Exception:  # noqa: BLE001 - any failure: the connection is not usable
            return False
        return self.alive

    def refused(self) -> bool:
        """Whether the connection ended because connecting was refused (nothing delivered)."""
        return _refused(self.error)

    async def aclose(self) -> None:
        """Close the connection (stopping a stdio server), cancelling it if it hangs."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if not await self.wait_ended(_CLOSE_TIMEOUT):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        group = cast(BaseExceptionGroup[BaseException], error)
        return "; ".join(_describe(e) for e in group.exceptions)
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


class MCPPool:
    """The connections of one worker (one per server), opened on first use."""

    def __init__(self, servers: Mapping[str, MCPServer]) -> None:
        self.servers = dict(servers)
        self._connections: dict[str, MCPConnection] = {}
        self._locks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def get(self, name: str, *, probe: bool = False) -> MCPConnection:
        """An open connection to server `name` (reused, or opened now); `ConnectFailed` if not.

        With `probe`, a reused connection must first answer a request without effect, so
        a server that went away since its last use is reconnected to *before* a call that
        must not be sent twice (rather than found gone after sending it).
        """
        server = self.servers[name]
        loop = asyncio.get_running_loop()
        known = self._locks.get(name)
        if known is None or known[0] is not loop:
            known = self._locks[name] = (loop, asyncio.Lock())
        async with known[1]:
            conn = self._connections.get(name)
            if conn is not None and conn.alive and (not probe or await conn.probe()):
                return conn
            if conn is not None:
                self.discard(conn)
            conn = MCPConnection(server)
            try:
                await conn.open()
            except BaseException:
                await conn.aclose()
                raise
            self._connections[name] = conn
            return conn

    def discard(self, conn: MCPConnection) -> None:
        """Stop using `conn` (its server went away); closed in the background."""
        if self._connections.get(conn.server.name) is conn:
            del self._connections[conn.server.name]
        if conn.loop is asyncio.get_running_loop():
            task = conn.loop.create_task(conn.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every connection (at worker shutdown)."""
        connections, self._connections = list(self._connections.values()), {}
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(c.aclose() for c in connections if c.loop is loop))
