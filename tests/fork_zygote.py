"""The fork server's zygote: a process that has imported towline's commands once and forks a
child for each command the tests run (`tests/forkserver.py` is the client and says why).

Started as `python tests/fork_zygote.py SOCKET` under towline's hash seed. It starts no thread
and no event loop, so forking it is safe: each child runs one command exactly as
`python -m towline.cli ARGS` (or `python SCRIPT ARGS`) would, with its own environment, working
directory, `sys.path` and standard streams, passed over the socket, and ends with that
command's exit code, which the zygote reports to the client once it has reaped the child.
A request from the launcher (`tests/fork_launcher.py`) brings a fourth descriptor, the read end
of a pipe only the launcher writes to: when it closes, the child kills its own process group.
"""

from __future__ import annotations

import array
import contextlib
import gc
import io
import json
import os
import selectors
import shutil
import signal
import socket
import sys
import threading
import traceback
from typing import Any

_ZYGOTE_PATH = os.environ.get("PYTHONPATH", "")
_MAX_REQUEST = 1 << 20
_MAX_FDS = 4
"""Standard streams, and the launcher's lifeline."""


def _base_path() -> list[str]:
    """This interpreter's `sys.path` without what is particular to how it was started: its
    script's folder and its PYTHONPATH entries (a child puts its own there)."""
    ours = {p for p in _ZYGOTE_PATH.split(os.pathsep) if p}
    return [p for p in sys.path[1:] if p not in ours]


def _streams(env: dict[str, str]) -> None:
    """Standard streams on fds 0-2 as a fresh interpreter would make them for `env`."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding = env.get("PYTHONIOENCODING", "").split(":")[0] or sys.stdout.encoding

    def out(fd: int, line: bool, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "w", closefd=False)
        buffered = io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors,
                                line_buffering=line or raw.isatty(), write_through=unbuffered)

    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=encoding)
    sys.stdout = out(1, False, "strict")
    sys.stderr = out(2, True, "backslashreplace")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _lifeline(fd: int) -> None:
    """Kill this child's process group once `fd` closes: the launcher standing in for it (the
    only writer of that pipe) is gone, as SIGKILL of its group would have taken the command."""
    os.set_inheritable(fd, False)

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 64):
                pass
        os.killpg(0, signal.SIGKILL)

    # started with every signal blocked, so that signals go to the command's own threads,
    # as in a process without this one
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        threading.Thread(target=watch, name="launcher-lifeline", daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _child(request: dict[str, Any], fds: list[int], base: list[str]) -> None:
    """Become the command's process, run it, and exit with its code (never returns)."""
    code = 1
    try:
        if request.get("new_session"):
            os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
            os.close(fd)
        if len(fds) > 3:  # from the launcher (tests/fork_launcher.py)
            _lifeline(fds[3])
        env: dict[str, str] = request["env"]
        script: str | None = request.get("script")  # else `python -m towline.cli ARGS`
        from towline.runtime.hashseed import COMMANDS

        if not script and request["args"][:1] and request["args"][0] in COMMANDS:
            # what such a command has after re-executing itself under towline's seed
            env = {**env, "PYTHONHASHSEED": os.environ["PYTHONHASHSEED"]}
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        first = os.path.dirname(os.path.abspath(script)) if script else os.getcwd()
        sys.path[:] = [first, *extra, *base]
        _streams(env)
        # signal dispositions need nothing: the zygote set none, so the child has an
        # interpreter's own (SIGINT raises KeyboardInterrupt, SIGPIPE ignored)
        if script:
            import runpy

            sys.argv = [script, *request["args"]]
            runpy.run_path(script, run_name="__main__")
            code = 0
        else:
            sys.argv = [request["argv0"], *request["args"]]
            from towline.cli import main

            main()  # leaves with os._exit
    except SystemExit as e:  # as the interpreter ends: an int is the code, else it is printed
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  (a fresh interpreter prints any uncaught error)
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(_MAX_REQUEST, socket.CMSG_LEN(_MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return json.loads(data), list(fds)


def serve(path: str) -> None:
    """Import the commands, then fork a child per request on `path` and report each child's
    status once reaped, until the test process that started this one is gone."""
    parent = os.getppid()
    from towline.cli import build_parser

    build_parser()  # imports every command's module
    import mcp.server.mcpserver  # the tests' MCP servers (tests/mcp_servers.py) fork from here
    del mcp
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them on the first scan
    base = _base_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while os.getppid() == parent:
        for _ in selector.select(timeout=0.05):
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in waiting.values():
                    other.close()
                conn.close()
                _child(request, fds, base)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode())
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(json.dumps({"status": status}).encode())
                except OSError:
                    pass
                conn.close()
    # the test process is gone: its folder (this socket, the launchers) goes with it
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1])
