"""A Temporal codec server: `/encode` and `/decode` over HTTP, for the UI and the `temporal` CLI.

The Temporal UI (its codec endpoint setting, or `temporal server start-dev
--ui-codec-endpoint`) and `temporal workflow show --codec-endpoint URL` post the
payloads they display to `<endpoint>/decode` as JSON (`{"payloads": [...]}`, the
protobuf JSON form of `temporal.api.common.v1.Payloads`) and show what comes back.
This server answers with the payloads decrypted by an `EncryptionCodec` (or any
`PayloadCodec`), so a user who can reach it — and holds its auth token, when one
is required — reads encrypted runs in clear; the Temporal server never sees a key.

Browsers call it cross-origin from the UI's page: CORS is answered for the
configured UI origins only (with credentials, so the UI may send the user's
token). Requests may be prefixed by a namespace (`/default/decode`) as some UI
setups do; the `X-Namespace` header is accepted and ignored (one key set serves
every namespace).

Who may call it: only requests addressed to it by name — localhost, the host it binds
and `allowed_hosts` (`towline.serve.http_guard.HostCheck`, the check `towline mcp-serve`
makes) — so a web page cannot reach it through DNS rebinding; with `same_user`, only
connections from processes of its own user (what `towline dev --encrypt` does: its endpoint
is on the `temporal` child's command line and in the UI's settings, both readable by any
local user); with `path` set, only requests under that secret path; with `auth`, only
requests carrying that `Authorization` header.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from towline.encryption.peer import peer_uid
from towline.errors import ConfigurationError
from towline.serve.http_guard import HostCheck

__all__ = ["CodecServer", "DEFAULT_ORIGINS", "MAX_BODY", "secret_path"]

DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
"""UI origins allowed by default: the embedded dev server's UI."""
MAX_BODY = 64 * 1024 * 1024
"""Largest request body accepted (the UI batches many payloads of up to 2 MiB)."""
_ALLOW_HEADERS = "Content-Type, X-Namespace, Authorization"
_READ_TIMEOUT = 30.0
"""Seconds a connection may take to send its request (a slow or stalled client frees its thread)."""
_DIGITS = re.compile(r"[0-9]{1,20}")


def secret_path() -> str:
    """A fresh unguessable path segment (128 bits) for `CodecServer.path`.

    Hex, so that it never begins with `-`, which a command line would read as an option
    (`--auth "$TOKEN"` refused 1 token in 64 that `token_urlsafe` made)."""
    return secrets.token_hex(16)


@dataclass
class CodecServer:
    """Serves `codec` on `host:port` in a background thread (`start()` / `stop()`)."""

    codec: PayloadCodec
    """Decodes (and encodes) the payloads, e.g. `EncryptionCodec()`."""
    host: str = "127.0.0.1"
    """Interface to listen on."""
    port: int = 0
    """Port (0: a free one, see `.port` after `start()`)."""
    origins: Sequence[str] = DEFAULT_ORIGINS
    """Browser origins (the Temporal UI's) allowed to call it; `*` allows any."""
    auth: str | None = None
    """When set, the exact `Authorization` header value every request must carry."""
    allowed_hosts: Sequence[str] = ()
    """`Host` names it answers besides localhost's and `host`'s (`*`: any; behind a proxy)."""
    path: str = ""
    """When set, a secret first path segment every request must start with (see `url`)."""
    same_user: bool = False
    """Answer only connections from processes of this server's own user (where the system
    tells, `towline.encryption.peer`; refused elsewhere): what `towline dev --encrypt` does,
    whose endpoint any local user can read."""
    hosts: HostCheck = field(init=False, repr=False)
    """The `Host` check (from `host` and `allowed_hosts`)."""
    _server: ThreadingHTTPServer | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.auth is not None and not self.auth.strip():
            raise ConfigurationError("the codec server's auth header value is empty")
        self.origins = tuple(o.rstrip("/") for o in self.origins)
        self.path = self.path.strip("/")
        if "/" in self.path or "?" in self.path:
            raise ConfigurationError("the codec server's path is one segment")
        self.hosts = HostCheck.serving(self.host, self.allowed_hosts)

    @property
    def url(self) -> str:
        """`http://host:port[/path]`, the codec endpoint to configure."""
        return f"http://{self.host}:{self.port}" + (f"/{self.path}" if self.path else "")

    def start(self) -> CodecServer:
        """Listen and serve in a daemon thread; returns self."""
        server = _QuietServer((self.host, self.port), _handler(self))
        self.port = int(server.server_address[1])
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="towline-codec-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def allowed_origin(self, origin: str | None) -> str | None:
        """The `Access-Control-Allow-Origin` answer for a request from `origin`."""
        if not origin:
            return None
        if "*" in self.origins or origin.rstrip("/") in self.origins:
            return origin
        return None

    def route(self, path: str) -> str | None:
        """The request path without the secret `path` (None if it does not start with it)."""
        path = path.split("?", 1)[0]
        if not self.path:
            return path
        first, _, rest = path.lstrip("/").partition("/")
        if not hmac.compare_digest(first.encode(), self.path.encode()):
            return None
        return "/" + rest

    def authorized(self, header: str | None) -> bool:
        """Whether a request's `Authorization` header passes (constant-time comparison)."""
        if self.auth is None:
            return True
        return header is not None and hmac.compare_digest(header.encode(), self.auth.encode())

    def transform(self, operation: str, body: bytes) -> bytes:
        """Run `/encode` or `/decode` on a request body; returns the response body."""
        request = Payloads()
        json_format.Parse(body.decode("utf-8"), request, ignore_unknown_fields=True)
        method = self.codec.encode if operation == "encode" else self.codec.decode
        result = asyncio.run(method(list(request.payloads)))
        return json_format.MessageToJson(Payloads(payloads=result)).encode()


class _QuietServer(ThreadingHTTPServer):
    """No traceback on stderr when a client goes away or stalls mid-request."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A broken or timed-out connection concerns that client only."""


def _handler(server: CodecServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "towline-codec-server"
        timeout = _READ_TIMEOUT

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: request lines would go to stderr on every UI refresh."""

        def _cors(self) -> None:
            origin = server.allowed_origin(self.headers.get("Origin"))
            if origin is not None:
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header("Access-Control-Allow-Headers", _ALLOW_HEADERS)
                self.send_header("Access-Control-Max-Age", "600")
            self.send_header("Vary", "Origin")

        def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self._cors()
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            self.close_connection = True  # the request's body may be unread
            self._reply(status, json.dumps({"error": message}).encode())

        def _refused(self) -> bool:
            """Answer a request not addressed to this server by name (DNS rebinding), or
            (`same_user`) from another user's process."""
            if not server.hosts.allows(self.headers.get("Host")):
                self._error(421, "this server does not answer to that Host name")
                return True
            here: Any = self.server.server_address
            peer: Any = self.client_address
            if server.same_user and peer_uid((here[0], here[1]), (peer[0], peer[1])) != os.getuid():
                self._error(403, "this codec server answers its own user's processes only")
                return True
            return False

        def _route(self) -> str | None:
            path = server.route(self.path)
            if path is None:
                self._error(404, "no such endpoint")
            return path

        def do_OPTIONS(self) -> None:
            if self._refused() or self._route() is None:
                return
            self.send_response(200 if server.allowed_origin(self.headers.get("Origin")) else 403)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            if self._refused() or self._route() is None:
                return
            self._reply(200, b"towline codec server: POST /encode or /decode\n", "text/plain")

        def do_POST(self) -> None:
            if self._refused():
                return
            path = self._route()
            if path is None:
                return
            operation = path.rstrip("/").rsplit("/", 1)[-1]
            if operation not in ("encode", "decode"):
                self._error(404, "no such endpoint: use /encode or /decode")
                return
            if not server.authorized(self.headers.get("Authorization")):
                self._error(401, "missing or wrong Authorization header")
                return
            declared = (self.headers.get("Content-Length") or "0").strip()
            if not _DIGITS.fullmatch(declared):
                self._error(400, "Content-Length is not a number of bytes")
                return
            length = int(declared)
            if length > MAX_BODY:
                self._error(413, f"request body over {MAX_BODY} bytes")
                return
            try:
                received = self.rfile.read(length)
            except OSError:  # the client stalled past the read timeout, or went away
                self.close_connection = True
                return
            if len(received) < length:
                self._error(400, "request body shorter than its Content-Length")
                return
            try:
                body = server.transform(operation, received)
            except (json_format.ParseError, UnicodeDecodeError) as e:
                self._error(400, f"not a Payloads JSON body: {e}")
                return
            except ValueError as e:  # e.g. DecryptionError: an unknown key id (never a key)
                self._error(400, str(e))
                return
            self._reply(200, body)

    return Handler
