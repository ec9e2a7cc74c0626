"""`python -m towline.cli ARGS` for the tests' own command helpers, forked from a process that
has imported towline once.

Why: the suite runs about two hundred commands through `cli_helpers.towline` that are not
docs commands, and each fresh interpreter spent about 0.5 s of CPU importing temporalio,
towline and their dependencies before parsing its arguments: with the crash tests' worker
processes, about a fifth of the suite's CPU. A zygote (`tests/fork_zygote.py`, one per test
process, started on first use) imports them once and forks a child per command. The child is still a process of its own
running the command's code from its entry point: its own environment, working directory,
`sys.path`, pipes, process id, signals and exit code, as `asyncio.subprocess.Process` gives
them (`ForkedProcess` has the same methods). Docs commands run exactly as written through
`bash -c` (`readme.py`), and the `towline` they find first on PATH is the launcher
(`tests/fork_launcher.py`, made by `launcher_env`), which has this zygote fork them too; so do
the tests' stdio MCP servers (`${TOWLINE_FORK_PYTHON}`, `mcp_helpers.stdio_launch`).

A command is forked only when its environment asks nothing a fork cannot give: towline's
hash seed (a process cannot change its own), and no `TOWLINE_FORK=0` (set it to run every
command in a fresh interpreter, as before). Otherwise, or when the zygote cannot start,
`towline_process` starts a fresh interpreter. The zygote leaves when its test process does
(it watches its parent), so nothing here needs tearing down.
"""

from __future__ import annotations

import array
import asyncio
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import towline.cli
from towline.runtime.hashseed import wanted_seed

__all__ = ["ForkedProcess", "ForkedPopen", "forked_towline", "forked_script", "launcher_env",
           "script_process"]

_ENTRY = str(Path(towline.cli.__file__ or "").with_name("__main__.py"))
"""The child's `sys.argv[0]`, as `python -m towline.cli` has it."""
_ZYGOTE = Path(__file__).with_name("fork_zygote.py")
_LAUNCHER = Path(__file__).with_name("fork_launcher.py")
_SEED = wanted_seed({})
"""The zygote's seed: the one towline's commands pin when `TOWLINE_HASH_SEED` is not set."""


def _servable(env: Mapping[str, str]) -> bool:
    """Whether a command run with `env` would hash with the zygote's seed (and may be forked)."""
    if env.get("TOWLINE_FORK", os.environ.get("TOWLINE_FORK", "1")) == "0":
        return False
    try:
        return wanted_seed(env) == _SEED and env.get("PYTHONHASHSEED") in (None, _SEED)
    except ValueError:  # a TOWLINE_HASH_SEED the command itself refuses
        return False


def _exit_code(status: bytes) -> int:
    """A child's exit code from the zygote's report (no report: the zygote went away)."""
    if not status:
        return -signal.SIGKILL
    return os.waitstatus_to_exitcode(json.loads(status)["status"])


@functools.cache
def _zygote() -> str | None:
    """The socket of this process's zygote, started on first use (None: it could not start)."""
    folder = tempfile.mkdtemp(prefix="towline-fork-")
    path = os.path.join(folder, "zygote.sock")
    env = {**os.environ, "PYTHONHASHSEED": _SEED}
    env.pop("TOWLINE_HASH_SEED", None)
    proc = subprocess.Popen([sys.executable, str(_ZYGOTE), path], env=env, cwd=folder,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    ready = proc.stdout.readline() if proc.stdout is not None else b""
    if ready.strip() != b"ready":
        proc.kill()
        proc.wait()
        return None
    return path


@functools.cache
def launcher_env() -> dict[str, str]:
    """What a docs command's environment needs for its `towline` and `python SCRIPT` to be
    forked by this process's zygote (`tests/fork_launcher.py`): `PATH_FIRST`, the folder of both
    launchers to put first on PATH, and the launchers' variables, `TOWLINE_FORK_PYTHON` among
    them (the launcher of `python SCRIPT`, for what starts a script by path, not by PATH).
    Empty when there is no zygote."""
    path = _zygote() if os.environ.get("TOWLINE_FORK", "1") != "0" else None
    if path is None:
        return {}
    folder = Path(path).parent / "bin"
    folder.mkdir(exist_ok=True)
    for name in ("towline", "python"):
        launcher = folder / name
        launcher.write_text(f"#!{sys.executable} -IS\n{_LAUNCHER.read_text()}")
        launcher.chmod(0o755)
    return {"PATH_FIRST": str(folder), "TOWLINE_FORK_SOCKET": path,
            "TOWLINE_FORK_SEED": _SEED, "TOWLINE_FORK_PYTHON": str(folder / "python")}


class ForkedProcess:
    """A command forked by the zygote, with `asyncio.subprocess.Process`'s interface."""

    def __init__(self, pid: int, conn: socket.socket, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self.pid = pid
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._conn = conn
        self._status: asyncio.Task[int] = asyncio.ensure_future(self._await_status())

    async def _await_status(self) -> int:
        loop = asyncio.get_running_loop()
        data = await loop.sock_recv(self._conn, 4096)
        self._conn.close()
        self.returncode = _exit_code(data)
        return self.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._status)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        del input
        out, err = await asyncio.gather(self.stdout.read(), self.stderr.read())
        await self.wait()
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    pipe = os.fdopen(fd, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader


def _fork(request: dict[str, Any], fds: tuple[int, int, int]) -> tuple[int, socket.socket] | None:
    """Have the zygote fork a child for `request` on `fds` (stdin, stdout, stderr): its pid and
    the connection its exit status will come on (None: no zygote)."""
    path = _zygote()
    if path is None:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        conn.sendmsg([json.dumps(request).encode()],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        started = conn.recv(4096)
    except OSError:
        conn.close()
        return None
    if not started:
        conn.close()
        return None
    return json.loads(started)["pid"], conn


async def forked_towline(args: tuple[str, ...], *, env: Mapping[str, str], cwd: Path,
                         new_session: bool = False) -> ForkedProcess | None:
    """`python -m towline.cli ARGS` forked from the zygote (None: run it the usual way)."""
    if not _servable(env):
        return None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        forked = _fork({"argv0": _ENTRY, "args": list(args), "env": dict(env), "cwd": str(cwd),
                        "new_session": new_session}, (null, out_w, err_w))
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    if forked is None:
        for fd in (out_r, err_r):
            os.close(fd)
        return None
    pid, conn = forked
    conn.setblocking(False)
    return ForkedProcess(pid, conn, await _reader(out_r), await _reader(err_r))


class ForkedPopen:
    """`python SCRIPT ARGS` forked from the zygote, with the part of `subprocess.Popen`'s
    interface the tests use (`pid`, `poll`, `wait`, `returncode`)."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            data = self._conn.recv(4096)
        except (TimeoutError, BlockingIOError):
            return None
        self._conn.close()
        self.returncode = _exit_code(data)
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        return code


def forked_script(script: Path, args: list[str], *, env: Mapping[str, str], cwd: Path,
                  stdout: int, stderr: int) -> ForkedPopen | None:
    """`python SCRIPT ARGS` forked from the zygote, its stdin /dev/null and its output on the
    given fds (None: start it the usual way)."""
    if env.get("PYTHONHASHSEED") != _SEED or not _servable(env):
        return None  # a script does not pin the seed: a fresh one hashes with what env says
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        forked = _fork({"script": str(script), "args": args, "env": dict(env), "cwd": str(cwd)},
                       (null, stdout, stderr))
    finally:
        os.close(null)
    return None if forked is None else ForkedPopen(*forked)


def script_process(script: Path, args: list[str], *, env: Mapping[str, str], cwd: Path,
                   output: int) -> subprocess.Popen[bytes] | ForkedPopen:
    """`python SCRIPT ARGS` under towline's hash seed (the zygote's, as `towline worker` runs
    with: `towline.runtime.hashseed`), its stdin /dev/null and its stdout and stderr on
    `output`: forked from the zygote where `env` allows, else a fresh interpreter."""
    env = {**env, "PYTHONHASHSEED": _SEED}
    forked = forked_script(script, args, env=env, cwd=cwd, stdout=output, stderr=output)
    return forked or subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=cwd,
                                      stdin=subprocess.DEVNULL, stdout=output, stderr=output)
