"""What the determinism guard watches for, and whose code it watches (`guard.py` watches).

The calls refused from user code, by kind: the clock, process-wide randomness, the
environment, per-process string hashing and I/O, each with the reason and the
replay-safe alternative a failure names. Built-in functions are matched by identity
(`C_CALLS`), built-in methods by what they are bound to (`owner_hit`), Python
functions by code object (`PY_CALLS`, with a check of `self` where it matters: the
global `random` instance, `os.environ`), and whole I/O modules by file (`IO_FILES`).
User code is any file outside the standard library, temporalio and what towline
passes through Temporal's sandbox (`is_user_file`).
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import pathlib
import random
import secrets
import socket
import sys
import sysconfig
import uuid
from collections.abc import Callable, Iterator
from types import CodeType, FunctionType, ModuleType
from typing import Any

__all__ = [
    "Hit", "CLOCK", "SLEEP", "RANDOM", "ENV", "HASH", "IO", "C_CALLS", "PY_CALLS", "IO_FILES",
    "OWNER_KINDS", "owner_hit", "is_user_file", "is_user_code", "shown",
]

CLOCK = "reads the clock", "use workflow.now() (and asyncio.sleep or workflow.sleep to wait)"
SLEEP = "blocks the workflow thread", "use asyncio.sleep or workflow.sleep (a durable timer)"
RANDOM = ("draws process-wide randomness",
           "use workflow.random() or workflow.uuid4(), which replay the same values")
ENV = ("reads the environment",
        "read configuration where the agent is defined (a capability field), or in an activity")
HASH = ("hashes with the per-process seed (PYTHONHASHSEED)",
         "use hashlib for a digest that is the same on every worker")
IO = ("does I/O", "do it in an activity: await workflow.execute_activity(...) from the hook")

Hit = tuple[str, tuple[str, str]]
"""What a watched call touched (`time.time()`) and why it is refused (reason, advice)."""

C_CALLS: dict[Any, Hit] = {}
"""Built-in functions refused by identity."""
PY_CALLS: dict[CodeType, tuple[str, tuple[str, str], Callable[[Any], bool] | None]] = {}
"""Python functions refused by code object, with a check of their `self` if any."""

for _name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
              "process_time", "process_time_ns", "thread_time", "thread_time_ns"):
    C_CALLS[getattr(__import__("time"), _name)] = (f"time.{_name}()", CLOCK)
C_CALLS[__import__("time").sleep] = ("time.sleep()", SLEEP)
C_CALLS[os.urandom] = ("os.urandom()", RANDOM)
C_CALLS[hash] = ("hash()", HASH)
C_CALLS[open] = ("open()", IO)
C_CALLS[input] = ("input()", IO)

_DATE_TYPES = (datetime.date, datetime.datetime)
_CLOCK_METHODS = frozenset({"now", "utcnow", "today"})
_SYSTEM_MODULE = sys.modules["nt" if os.name == "nt" else "posix"]
_HARMLESS_OS = frozenset({"fspath", "fsencode", "fsdecode", "strerror"})


def _is_environ(value: Any) -> bool:
    return value is os.environ or value is getattr(os, "environb", None)


def _is_global_random(value: Any) -> bool:
    return value is getattr(random, "_inst", None) or isinstance(value, random.SystemRandom)


def _functions(cls: type) -> Iterator[tuple[str, FunctionType]]:
    for name, value in vars(cls).items():
        fn = getattr(value, "__func__", value)
        if isinstance(fn, FunctionType):
            yield name, fn


def _environ_name(method: str) -> str:
    return {"__getitem__": "os.environ[...]", "__iter__": "iterating os.environ",
            "__contains__": "'in os.environ'", "__len__": "len(os.environ)"}.get(
        method, f"os.environ.{method}()")


def _build_tables() -> None:
    from collections.abc import Mapping, MutableMapping

    for cls in (type(os.environ), MutableMapping, Mapping):
        for name, fn in _functions(cls):
            PY_CALLS.setdefault(fn.__code__, (_environ_name(name), ENV, _is_environ))
    for fn in (os.getenv, getattr(os, "getenvb", None)):
        if isinstance(fn, FunctionType):
            PY_CALLS[fn.__code__] = (f"os.{fn.__name__}()", ENV, None)
    for fn in (uuid.uuid1, uuid.uuid4):
        PY_CALLS[fn.__code__] = (f"uuid.{fn.__name__}()", RANDOM, None)
    for fn in (secrets.token_bytes, secrets.token_hex, secrets.token_urlsafe, secrets.randbelow):
        if isinstance(fn, FunctionType):
            PY_CALLS[fn.__code__] = (f"secrets.{fn.__name__}()", RANDOM, None)
    for cls in (random.Random, random.SystemRandom):
        for name, fn in _functions(cls):
            if not name.startswith("__"):
                PY_CALLS.setdefault(fn.__code__, (f"random.{name}()", RANDOM, _is_global_random))
    for name, fn in _functions(pathlib.Path):
        if not name.startswith("_") and name not in ("with_segments",):
            PY_CALLS[fn.__code__] = (f"pathlib.Path.{name}()", IO, None)


_build_tables()

IO_FILES: dict[str, str] = {}
"""Standard-library files whose every function does I/O, by path: the module's name."""
for _module in ("socket", "ssl", "subprocess", "shutil", "urllib.request", "http.client",
                "smtplib", "ftplib"):
    _spec = importlib.util.find_spec(_module)
    if _spec is not None and _spec.origin:
        IO_FILES[_spec.origin] = _module


def owner_hit(owner: Any, fn: Any) -> Hit | None:
    """A refused built-in method, by what it is bound to (a module, a class, an instance)."""
    kind: object = owner.__class__
    name: str = getattr(fn, "__name__", "?")
    if kind is ModuleType:
        if owner is _SYSTEM_MODULE and name not in _HARMLESS_OS:
            return f"os.{name}()", IO
        if owner is sys.modules.get("_socket"):
            return f"socket.{name}()", IO
        return None
    if kind is type:
        if owner in _DATE_TYPES and name in _CLOCK_METHODS:
            return f"datetime.{owner.__name__}.{name}()", CLOCK
        return None
    if _is_global_random(owner):
        return f"random.{name}()", RANDOM
    if isinstance(owner, socket.socket):
        return f"socket.socket.{name}()", IO
    return None


def _library_roots() -> tuple[str, ...]:
    """Folders of code that is not the user's: the standard library, temporalio, and what
    towline passes through Temporal's sandbox (towline itself and the libraries its workflow
    code uses, as `towline.plugin.PASSTHROUGH_MODULES` lists them). Their calls are not
    watched: the engine runs them inside user hooks too (a wrapped model call's tracing)."""
    from towline.plugin import PASSTHROUGH_MODULES  # here: the plugin imports this package

    # the standard library's own folder (a venv's `platstdlib` would hold site-packages too)
    roots: set[str] = {os.path.dirname(sysconfig.__file__), sysconfig.get_paths()["stdlib"]}
    # towline's role packages are symlinks in a checkout (towline/workflows -> ../workflows):
    # their modules may be named by either path, so both spellings are roots
    for name in ("temporalio", "towline.workflows", "towline.activities", "towline.capabilities",
                 *PASSTHROUGH_MODULES):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        # packages by their folders (namespace packages such as `opentelemetry` have no
        # `__init__`), plain modules by their file
        roots.update(spec.submodule_search_locations or ([spec.origin] if spec.origin else []))
    roots |= {os.path.realpath(r) for r in roots}
    return tuple(sorted(roots))


_roots: list[str] = []
_USER_FILES: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    """Whether code in `filename` is watched: the user's (or a library not passed through)."""
    known = _USER_FILES.get(filename)
    if known is None:
        if not _roots:
            _roots.extend(_library_roots())
        if filename.startswith("<"):  # <frozen os>, <string> (dataclass methods), ...
            known = filename.startswith("<ipython-input")
        else:
            known = not any(_under(filename, root) for root in _roots)
        _USER_FILES[filename] = known
    return known


_INSTALLED = ("site-packages", "dist-packages")


def _under(filename: str, root: str) -> bool:
    """Whether `filename` is in `root`, not counting the installed packages a standard-library
    folder may hold (`/usr/local/lib/python3.11/site-packages` in Python's Docker images)."""
    if not filename.startswith(root + os.sep):
        return filename == root
    return filename[len(root) + 1:].split(os.sep, 1)[0] not in _INSTALLED


def is_user_code(fn: Any, owner: Any = None) -> bool:
    """Whether calling `fn` (a hook of `owner`, a capability) runs user code.

    False only for towline's own functions of towline's own capability classes: a
    subclass defined elsewhere may override what a built-in hook calls.
    """
    while True:
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
        if inner is None:
            break
        fn = inner
    code: CodeType | None = getattr(fn, "__code__", None)
    if code is None or is_user_file(code.co_filename):
        return True
    if owner is None:
        return False
    cls: Any = owner if isinstance(owner, type) else type(owner)
    return not str(getattr(cls, "__module__", "")).startswith("towline.")


def shown(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative


OWNER_KINDS = frozenset({ModuleType, type, random.Random, random.SystemRandom, socket.socket})
"""The kinds of object a refused built-in method can be bound to (checked first: fast)."""
