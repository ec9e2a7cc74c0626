"""What the determinism guard watches for, and whose code it watches (`guard.py` watches).

The calls refused from user code, by kind: the clock, the worker's time zone,
process-wide randomness, the environment, per-process string hashing, memory
addresses, threads and I/O, each with the reason and the replay-safe alternative a
failure names. Built-in functions are matched by identity (`C_CALLS`; a few only when
called without the time they may be given, `TIME_ARGS`, which `call_args` counts from
the caller's bytecode), built-in methods by what they are bound to (`owner_hit`),
Python functions by code object (`PY_CALLS`, with a check of their arguments where it
matters: the global `random` instance, `os.environ`, a `random.Random()` without a
seed), and whole I/O modules by file (`IO_FILES`). User code is any file outside the
standard library, temporalio and what towline passes through Temporal's sandbox
(`is_user_file`).
"""

from __future__ import annotations

import _thread
import asyncio.threads
import concurrent.futures
import concurrent.futures.process
import concurrent.futures.thread
import datetime
import dis
import glob
import importlib.util
import io
import linecache
import multiprocessing.pool
import multiprocessing.process
import os
import pathlib
import random
import secrets
import socket
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any

from .passthrough import PASSTHROUGH_MODULES

__all__ = [
    "Hit", "CLOCK", "ZONE", "SLEEP", "RANDOM", "ENV", "HASH", "ADDRESS", "THREAD", "IO", "C_CALLS",
    "TIME_ARGS", "PY_CALLS", "IO_FILES", "OWNER_KINDS", "ENVIRON", "environ_hit", "call_args", "owner_hit",
    "is_user_file", "is_user_code", "shown",
]

CLOCK = "reads the clock", "use workflow.now() (and asyncio.sleep or workflow.sleep to wait)"
ZONE = ("reads the worker's time zone (each worker may have its own)",
        "convert with time.gmtime(t) or datetime.fromtimestamp(t, tz=...), naming the zone")
SLEEP = "blocks the workflow thread", "use asyncio.sleep or workflow.sleep (a durable timer)"
RANDOM = ("draws process-wide randomness",
           "use workflow.random() or workflow.uuid4(), which replay the same values")
ENV = ("reads the environment",
        "read configuration where the agent is defined (a capability field), or in an activity")
HASH = ("hashes with the per-process seed (PYTHONHASHSEED)",
         "use hashlib for a digest that is the same on every worker")
IO = ("does I/O", "do it in an activity: await workflow.execute_activity(...) from the hook")
ADDRESS = ("returns a memory address, which differs in every process",
           "compare objects with `is`, or key a dict by the object itself")
THREAD = (("starts a thread or process: code the guard does not watch, run at times no replay "
           "reproduces"), "do the work in the hook itself, or in an activity")

Hit = tuple[str, tuple[str, str]]
"""What a watched call touched (`time.time()`) and why it is refused (reason, advice)."""

C_CALLS: dict[Any, Hit] = {}
"""Built-in functions refused by identity."""
TIME_ARGS: dict[Any, tuple[int, Hit | None]] = {}
"""Built-ins of `C_CALLS` that read the clock only when not given a time: how many
arguments give it, and what the call still touches then (None: nothing)."""
PY_CALLS: dict[CodeType, tuple[str, tuple[str, str], Callable[[dict[str, Any]], bool] | None]] = {}
"""Python functions refused by code object, with a check of their arguments if any."""

for _name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
              "process_time", "process_time_ns", "thread_time", "thread_time_ns",
              "clock_gettime", "clock_gettime_ns"):
    if hasattr(time, _name):
        C_CALLS[getattr(time, _name)] = (f"time.{_name}()", CLOCK)
for _name, _given in (("gmtime", 1), ("asctime", 1), ("strftime", 2), ("localtime", 1),
                      ("ctime", 1)):
    C_CALLS[getattr(time, _name)] = (f"time.{_name}() without a time", CLOCK)
    # in the local time zone, a given time still depends on the worker
    _zoned = (f"time.{_name}()", ZONE) if _name in ("localtime", "ctime") else None
    TIME_ARGS[getattr(time, _name)] = (_given, _zoned)
C_CALLS[time.mktime] = ("time.mktime()", ZONE)
C_CALLS[time.sleep] = ("time.sleep()", SLEEP)
C_CALLS[os.urandom] = ("os.urandom()", RANDOM)
C_CALLS[hash] = ("hash()", HASH)
C_CALLS[id] = ("id()", ADDRESS)
C_CALLS[open] = ("open()", IO)
C_CALLS[io.open_code] = ("io.open_code()", IO)
C_CALLS[input] = ("input()", IO)
C_CALLS[_thread.start_new_thread] = ("_thread.start_new_thread()", THREAD)  # = its alias start_new

_CALLS = frozenset(dis.opmap[name] for name in ("CALL", "PRECALL", "CALL_KW") if name in dis.opmap)


def call_args(frame: FrameType) -> int:
    """How many arguments the call `frame` is making passes (its bytecode says, at the call
    instruction a `c_call` event is raised at); -1 when unknown (`f(*args)`)."""
    code, at = frame.f_code.co_code, frame.f_lasti
    if at < 0 or code[at] not in _CALLS:
        return -1
    return code[at + 1]


_CLOCK_METHODS = frozenset({"now", "utcnow", "today"})
_SYSTEM_MODULE = sys.modules["nt" if os.name == "nt" else "posix"]
_HARMLESS_OS = frozenset({"fspath", "fsencode", "fsdecode", "strerror"})
ENVIRON: dict[Any, Any] = _SYSTEM_MODULE.environ
"""`posix.environ`: the plain dict `os.environ` reads from (its methods are refused)."""


def environ_hit(method: Any) -> Hit:
    """A refused method of `ENVIRON` (`posix.environ.get()`)."""
    return f"{_SYSTEM_MODULE.__name__}.environ.{method.__name__}()", ENV


def _is_environ(value: Any) -> bool:
    return value is os.environ or value is getattr(os, "environb", None)


def _is_global_random(value: Any) -> bool:
    return value is getattr(random, "_inst", None) or isinstance(value, random.SystemRandom)


def _self_is(check: Callable[[Any], bool]) -> Callable[[dict[str, Any]], bool]:
    return lambda args: check(args.get("self"))


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
            PY_CALLS.setdefault(fn.__code__, (_environ_name(name), ENV, _self_is(_is_environ)))
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
                PY_CALLS.setdefault(fn.__code__, (f"random.{name}()", RANDOM,
                                                  _self_is(_is_global_random)))
    # a generator of its own is fine once seeded; without a seed it draws from os.urandom
    PY_CALLS[random.Random.__init__.__code__] = (
        "random.Random() without a seed", RANDOM, lambda args: args.get("x") is None)
    PY_CALLS[random.Random.seed.__code__] = (
        "random.seed()", RANDOM,
        lambda args: args.get("a") is None or _is_global_random(args.get("self")))
    for name, fn in _functions(pathlib.Path):
        if not name.startswith("_") and name not in ("with_segments",):
            PY_CALLS[fn.__code__] = (f"pathlib.Path.{name}()", IO, None)
    for module, names in ((linecache, ("getline", "getlines", "updatecache", "checkcache")),
                          (glob, ("glob", "iglob", "glob0", "glob1"))):
        for name in names:
            fn = getattr(module, name, None)
            if isinstance(fn, FunctionType):
                PY_CALLS[fn.__code__] = (f"{module.__name__}.{name}()", IO, None)
    # the guard watches the thread a hook runs in: work handed to another is unwatched
    for shown_as, fn in (
        ("threading.Thread.start()", threading.Thread.start),
        ("ThreadPoolExecutor.submit()", concurrent.futures.thread.ThreadPoolExecutor.submit),
        ("ProcessPoolExecutor.submit()", concurrent.futures.process.ProcessPoolExecutor.submit),
        ("Executor.map()", concurrent.futures.Executor.map),
        ("asyncio.to_thread()", asyncio.threads.to_thread),
        ("multiprocessing.Process.start()", multiprocessing.process.BaseProcess.start),
        ("multiprocessing.pool.Pool()", multiprocessing.pool.Pool.__init__),
        ("multiprocessing.pool.ThreadPool()", multiprocessing.pool.ThreadPool.__init__),
    ):
        PY_CALLS[fn.__code__] = (shown_as, THREAD, None)


_build_tables()

IO_FILES: dict[str, str] = {}
"""Standard-library files whose every function does I/O, by path: the module's name."""
for _module in ("socket", "ssl", "subprocess", "shutil", "urllib.request", "http.client",
                "smtplib", "ftplib"):
    _spec = importlib.util.find_spec(_module)
    if _spec is not None and _spec.origin:
        IO_FILES[_spec.origin] = _module


def owner_hit(owner: Any, fn: Any, frame: FrameType) -> Hit | None:
    """A refused built-in method, by what it is bound to (a module, a class, an instance),
    called from `frame`."""
    kind: object = owner.__class__
    name: str = getattr(fn, "__name__", "?")
    if kind is ModuleType:
        if owner is _SYSTEM_MODULE and name not in _HARMLESS_OS:
            return f"os.{name}()", IO
        if owner is sys.modules.get("_socket"):
            return f"socket.{name}()", IO
        return None
    if kind is type:
        if not issubclass(owner, datetime.date):
            return None
        shown_as = (f"datetime.{owner.__name__}" if owner in (datetime.date, datetime.datetime)
                    else owner.__qualname__)  # a subclass: its own name
        if name in _CLOCK_METHODS:
            return f"{shown_as}.{name}()", CLOCK
        # `datetime.fromtimestamp(t, tz)` names its zone; without one it is the worker's
        if name == "fromtimestamp" and not (issubclass(owner, datetime.datetime)
                                            and call_args(frame) >= 2):
            return f"{shown_as}.{name}()", ZONE
        return None
    if _is_global_random(owner):
        return f"random.{name}()", RANDOM
    if isinstance(owner, socket.socket):
        return f"socket.socket.{name}()", IO
    if isinstance(owner, io.FileIO):
        return f"io.FileIO.{name}()", IO
    return None


def _library_roots() -> tuple[str, ...]:
    """Folders of code that is not the user's: the standard library, temporalio, and what
    towline passes through Temporal's sandbox (towline itself and the libraries its workflow
    code uses, as `towline.runtime.plugin.PASSTHROUGH_MODULES` lists them). Their calls are not
    watched: the engine runs them inside user hooks too (a wrapped model call's tracing)."""
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


OWNER_KINDS = frozenset({ModuleType, type, random.Random, random.SystemRandom, socket.socket,
                         io.FileIO})
"""The kinds of object a refused built-in method can be bound to (checked first: fast)."""
