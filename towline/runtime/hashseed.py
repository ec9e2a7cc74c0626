"""One string-hash seed for every towline process, so hook code that iterates a set replays.

Python seeds its hash of `str` and `bytes` per process (`PYTHONHASHSEED`, random by
default), and a set or frozenset of them (or of tuples and objects that hash them)
iterates in an order that follows that hash. Hook code runs as workflow code: a hook
that takes `next(iter(names))`, or starts a timer inside `for name in names:`, takes
another path in a process with another seed, and the runs it recorded no longer replay
there (`TMPRL1100`, after a worker restart). The determinism guard cannot refuse the
iteration (a `for` loop makes no call it sees), and a process cannot change its own
seed; so the towline commands that run workflow code (`COMMANDS`) re-execute
themselves under one seed, `PYTHONHASHSEED=0` or the value of `TOWLINE_HASH_SEED`
(`pin_hash_seed`), and `TowlinePlugin` warns when a worker or replayer runs under any
other (`warn_unless_pinned`).

Seed 0 turns hash randomisation off, and randomisation is what protects dicts keyed by
attacker-chosen strings from collision floods: a deployment that wants that protection
sets `TOWLINE_HASH_SEED` to a secret number, the same on every worker.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

__all__ = ["COMMANDS", "SEED_VARIABLE", "wanted_seed", "process_seed", "pin_hash_seed",
           "warn_unless_pinned"]

SEED_VARIABLE = "TOWLINE_HASH_SEED"
"""The environment variable naming the seed towline's processes hash with (default 0)."""
COMMANDS = frozenset({"worker", "dev", "run", "mcp-serve", "replay", "rerun", "eval", "serve"})
"""The `towline` commands that run workflow code (a worker or a `Replayer`)."""

_log = logging.getLogger("towline")
_MAX_SEED = 4294967295  # what Python accepts in PYTHONHASHSEED
_warned: set[str] = set()


def _seed(value: str | None) -> str | None:
    """`value` as PYTHONHASHSEED's number (None: not one, e.g. unset or "random")."""
    value = (value or "").strip()
    if not value.isdigit() or int(value) > _MAX_SEED:
        return None
    return str(int(value))


def wanted_seed(environ: Mapping[str, str] = os.environ) -> str:
    """The seed towline's processes hash with: `TOWLINE_HASH_SEED`, or 0.

    Raises ValueError if `TOWLINE_HASH_SEED` is set but not a number Python accepts.
    """
    given = environ.get(SEED_VARIABLE, "").strip()
    if not given:
        return "0"
    seed = _seed(given)
    if seed is None:
        raise ValueError(f"{SEED_VARIABLE}={given!r} is not a number from 0 to {_MAX_SEED}")
    return seed


def process_seed() -> str | None:
    """The seed this process hashes strings with (None: a random one).

    Read from the environment the interpreter started with: a process started with
    `-E` or `-I` ignores `PYTHONHASHSEED`, so its seed is random.
    """
    if sys.flags.ignore_environment:
        return None
    return _seed(os.environ.get("PYTHONHASHSEED"))


def pin_hash_seed(argv: Sequence[str]) -> None:
    """Re-execute this process under towline's seed if its command (`argv[0]`, as the
    `towline` script received it) runs workflow code and the seed is another.

    The process is replaced (`os.execve`; on Windows, a child runs the command and this
    process exits with its code), so nothing of it survives: call it first thing. A
    process that ignores its environment (`-E`) cannot be pinned this way and goes on
    (its workers warn). An invalid `TOWLINE_HASH_SEED` ends it with exit code 2.
    """
    if not argv or argv[0] not in COMMANDS:
        return
    try:
        wanted = wanted_seed()
    except ValueError as e:
        print(f"towline: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if process_seed() == wanted or sys.flags.ignore_environment or not sys.executable:
        return
    env = {**os.environ, "PYTHONHASHSEED": wanted}
    args = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name != "posix":  # no exec that keeps the process on Windows
        raise SystemExit(subprocess.call(args, env=env))
    os.execve(sys.executable, args, env)


def warn_unless_pinned(what: str) -> None:
    """Log (once per process and `what`) that this process hashes with another seed than
    towline's commands: runs its workers record may not replay on theirs, and back."""
    if what in _warned:
        return
    _warned.add(what)
    try:
        wanted = wanted_seed()
    except ValueError as e:
        _log.warning("%s; towline's commands refuse to start", e)
        return
    seed = process_seed()
    if seed == wanted:
        return
    now = "a random string-hash seed" if seed is None else f"PYTHONHASHSEED={seed}"
    _log.warning(
        "this %s runs with %s, not the PYTHONHASHSEED=%s towline's commands run with: hook "
        "code that iterates a set of strings takes another order here, and runs recorded "
        "by one kind of worker fail to replay on the other (TMPRL1100). Start it with "
        "PYTHONHASHSEED=%s in its environment, or with `towline worker` (docs/hook-code.md: "
        "Hook code is workflow code).", what, now, wanted, wanted)
