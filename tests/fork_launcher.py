"""The `towline` that docs commands find first on PATH in the tests: it has the test process's
zygote fork the command (`tests/forkserver.py`) and stands in for it until it ends.

Docs commands run exactly as written through `bash -c` (`readme.py`); what `towline` names there
is this launcher, copied by `forkserver.launcher_env()` with this interpreter in its `#!` line
(`-I -S`: it imports nothing but what it needs). It sends the zygote its arguments, environment,
working directory and standard streams, so the forked child is the command as
`.venv/bin/towline ARGS` would run it: `towline.cli.main` with the same `sys.argv`, streams, exit
code, and a session of its own. Meanwhile this process is the one the test holds:

- a signal it gets (SIGINT, SIGTERM, ...) goes on to the child's process group, as the group
  signal the test sends would have reached the command and its children;
- it ends as the child ended: with its exit code, or killed by the same signal;
- the child holds the read end of a pipe only this process writes to: when this process dies
  (SIGKILL of its group), the child sees the pipe close and kills its own group.

Copied as `python`, it does the same for `python SCRIPT ARGS` (the examples the docs run, the
tests' MCP servers, which the worker starts with `${TOWLINE_FORK_PYTHON}`): the child runs the
script as `__main__`, as a fresh interpreter would. Anything else (`python -m ...`, options) is
left to the real one.

Where the zygote cannot serve the command (no socket, `TOWLINE_FORK=0`, another hash seed than
the zygote's), it executes the real program instead.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import sys
from types import FrameType

_RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2)


_SCRIPT = os.path.basename(sys.argv[0]) == "python"
"""Launched as `python SCRIPT ARGS`, not as `towline ARGS`."""
_TOWLINE = os.path.join(os.path.dirname(sys.executable), "towline")


def _real() -> None:
    """Become the real program: this interpreter, or the `towline` of its scripts folder."""
    real = sys.executable if _SCRIPT else _TOWLINE
    os.execv(real, [real, *sys.argv[1:]])


def _request(env: dict[str, str]) -> dict[str, object]:
    """What the zygote forks: the script with its arguments, or `towline.cli` with them."""
    common = {"env": env, "cwd": os.getcwd(), "new_session": True}
    if _SCRIPT:
        return {"script": os.path.abspath(sys.argv[1]), "args": sys.argv[2:], **common}
    return {"argv0": _TOWLINE, "args": sys.argv[1:], **common}


def _servable(env: dict[str, str]) -> bool:
    seed = env.get("TOWLINE_FORK_SEED")
    if _SCRIPT and (len(sys.argv) < 2 or sys.argv[1].startswith("-")
                    or not os.path.isfile(sys.argv[1])):
        return False
    return (bool(env.get("TOWLINE_FORK_SOCKET")) and env.get("TOWLINE_FORK") != "0"
            and seed is not None and env.get("PYTHONHASHSEED") == seed
            and env.get("TOWLINE_HASH_SEED", "").strip() in ("", seed))


def main() -> None:
    env = dict(os.environ)
    if not _servable(env):
        _real()
    child = 0
    early: list[int] = []

    def relay(sig: int, frame: FrameType | None) -> None:
        del frame
        if not child:
            early.append(sig)
            return
        try:
            os.killpg(child, sig)
        except ProcessLookupError:  # not yet in a session of its own
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass

    for sig in _RELAYED:
        signal.signal(sig, relay)
    lifeline, held = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(env["TOWLINE_FORK_SOCKET"])
        conn.sendmsg([json.dumps(_request(env)).encode()],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2, lifeline]))])
        started = conn.recv(4096)
    except OSError:
        started = b""
    os.close(lifeline)
    if not started:
        conn.close()
        os.close(held)
        _real()
    child = json.loads(started)["pid"]
    for sig in early:
        relay(sig, None)
    status = conn.recv(4096)  # retried after each relayed signal (PEP 475)
    os.close(held)
    code = os.waitstatus_to_exitcode(json.loads(status)["status"]) if status else -signal.SIGKILL
    sys.stdout.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
