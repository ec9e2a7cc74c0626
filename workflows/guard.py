"""The determinism guard: user code that towline calls from workflow code runs watched.

Capability and middleware hooks, `wrap_model_call` wrappers, reducers, completion
checks, output validators and `in_workflow` tools are user code that runs as
workflow code, so a replay (after a crash, on another worker) must take exactly the
same path. towline imports agents once, outside Temporal's sandbox, so the sandbox
cannot see them; this guard gives them the same protection, cheaply.

While such code runs, `sys.setprofile` watches every call made *from a user frame*
(any file outside the standard library, towline, temporalio and the libraries
towline passes through the sandbox) to the clock (`time.time`, `datetime.now`, ...),
process-wide randomness (the `random` module's global instance, `SystemRandom`,
`secrets`, `os.urandom`, `uuid.uuid1/uuid4`), the environment (`os.environ`,
`os.getenv`), per-process string hashing (`hash()` outside a `__hash__`), and I/O
(`open`, `os.*`, `pathlib.Path` I/O, `socket`, `ssl`, `subprocess`, `shutil`,
`urllib.request`, `http.client`). Such a call raises `NondeterministicHook` where
it is made (so the I/O never happens), and the run fails with it even if the hook
swallowed the exception. `workflow.now()`, `workflow.random()` and
`workflow.uuid4()` are Temporal's and pass; `with workflow.unsafe.sandbox_unrestricted():`
lets a call through on purpose, as it does in Temporal's sandbox.

The profiler is installed only while the user code's own steps run (an async hook
is watched each time it is resumed, and so are the tasks it starts), and the
previous profiler is put back after each step; nothing runs per run start, and
towline's own capabilities (whose code is checked in this repository) are not
watched at all (`is_user_code`), except where they call user code (a
`CompletionGate` check).
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import inspect
import os
import pathlib
import random
import secrets
import socket
import sys
import sysconfig
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any

from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError

from towline.errors import NondeterministicHook, runtime_failure

__all__ = ["Guard", "guarded", "guarded_sync", "is_user_file", "is_user_code"]

_CLOCK = "reads the clock", "use workflow.now() (and asyncio.sleep or workflow.sleep to wait)"
_SLEEP = "blocks the workflow thread", "use asyncio.sleep or workflow.sleep (a durable timer)"
_RANDOM = ("draws process-wide randomness",
           "use workflow.random() or workflow.uuid4(), which replay the same values")
_ENV = ("reads the environment",
        "read configuration where the agent is defined (a capability field), or in an activity")
_HASH = ("hashes with the per-process seed (PYTHONHASHSEED)",
         "use hashlib for a digest that is the same on every worker")
_IO = ("does I/O", "do it in an activity: await workflow.execute_activity(...) from the hook")

_Hit = tuple[str, tuple[str, str]]
"""What a watched call touched (`time.time()`) and why it is refused (reason, advice)."""

_C: dict[Any, _Hit] = {}
"""Built-in functions refused by identity."""
_PY: dict[CodeType, tuple[str, tuple[str, str], Callable[[Any], bool] | None]] = {}
"""Python functions refused by code object, with a check of their `self` if any."""

for _name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
              "process_time", "process_time_ns", "thread_time", "thread_time_ns"):
    _C[getattr(__import__("time"), _name)] = (f"time.{_name}()", _CLOCK)
_C[__import__("time").sleep] = ("time.sleep()", _SLEEP)
_C[os.urandom] = ("os.urandom()", _RANDOM)
_C[hash] = ("hash()", _HASH)
_C[open] = ("open()", _IO)
_C[input] = ("input()", _IO)

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
            _PY.setdefault(fn.__code__, (_environ_name(name), _ENV, _is_environ))
    for fn in (os.getenv, getattr(os, "getenvb", None)):
        if isinstance(fn, FunctionType):
            _PY[fn.__code__] = (f"os.{fn.__name__}()", _ENV, None)
    for fn in (uuid.uuid1, uuid.uuid4):
        _PY[fn.__code__] = (f"uuid.{fn.__name__}()", _RANDOM, None)
    for fn in (secrets.token_bytes, secrets.token_hex, secrets.token_urlsafe, secrets.randbelow):
        if isinstance(fn, FunctionType):
            _PY[fn.__code__] = (f"secrets.{fn.__name__}()", _RANDOM, None)
    for cls in (random.Random, random.SystemRandom):
        for name, fn in _functions(cls):
            if not name.startswith("__"):
                _PY.setdefault(fn.__code__, (f"random.{name}()", _RANDOM, _is_global_random))
    for name, fn in _functions(pathlib.Path):
        if not name.startswith("_") and name not in ("with_segments",):
            _PY[fn.__code__] = (f"pathlib.Path.{name}()", _IO, None)


_build_tables()

_IO_FILES: dict[str, str] = {}
"""Standard-library files whose every function does I/O, by path: the module's name."""
for _module in ("socket", "ssl", "subprocess", "shutil", "urllib.request", "http.client",
                "smtplib", "ftplib"):
    _spec = importlib.util.find_spec(_module)
    if _spec is not None and _spec.origin:
        _IO_FILES[_spec.origin] = _module


def _owner_hit(owner: Any, fn: Any) -> _Hit | None:
    """A refused built-in method, by what it is bound to (a module, a class, an instance)."""
    kind: object = owner.__class__
    name: str = getattr(fn, "__name__", "?")
    if kind is ModuleType:
        if owner is _SYSTEM_MODULE and name not in _HARMLESS_OS:
            return f"os.{name}()", _IO
        if owner is sys.modules.get("_socket"):
            return f"socket.{name}()", _IO
        return None
    if kind is type:
        if owner in _DATE_TYPES and name in _CLOCK_METHODS:
            return f"datetime.{owner.__name__}.{name}()", _CLOCK
        return None
    if _is_global_random(owner):
        return f"random.{name}()", _RANDOM
    if isinstance(owner, socket.socket):
        return f"socket.socket.{name}()", _IO
    return None


def _library_roots() -> tuple[str, ...]:
    """Folders of code that is not the user's: the standard library, towline, temporalio and
    the libraries towline passes through the sandbox (their calls are not watched)."""
    # the standard library's own folder (a venv's `platstdlib` would hold site-packages too)
    roots: set[str] = {os.path.dirname(sysconfig.__file__), sysconfig.get_paths()["stdlib"]}
    # towline's role packages are symlinks in a checkout (towline/workflows -> ../workflows):
    # their modules may be named by either path, so both spellings are roots
    for name in ("towline", "towline.workflows", "towline.activities", "towline.capabilities",
                 "temporalio", "pydantic", "pydantic_core", "google.protobuf", "opentelemetry",
                 "typing_extensions", "annotated_types", "typing_inspection"):
        module = sys.modules.get(name)
        spec_file = getattr(module, "__file__", None)
        if spec_file is None:
            continue
        root = os.path.dirname(spec_file) if spec_file.endswith("__init__.py") else spec_file
        roots.add(root)
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


def _shown(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative


_OWNER_KINDS = frozenset({ModuleType, type, random.Random, random.SystemRandom, socket.socket})
"""The kinds of object a refused built-in method can be bound to (checked first: fast)."""


def _profiler(guard: Guard) -> Callable[[FrameType, str, Any], None]:
    """The profile function of `guard`: it runs for every call, so it rejects fast."""
    c_hit, py_hit, io_module, kinds = _C.get, _PY.get, _IO_FILES.get, _OWNER_KINDS

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            hit = c_hit(arg)
            if hit is None:
                owner = getattr(arg, "__self__", None)
                if owner.__class__ not in kinds:
                    return
                hit = _owner_hit(owner, arg)
                if hit is None:
                    return
            guard._judge(hit, frame)  # pyright: ignore[reportPrivateUsage]
        elif event == "call":
            code = frame.f_code
            entry = py_hit(code)
            if entry is None:
                module = io_module(code.co_filename)
                if module is None:
                    return
                hit = (f"{module}.{code.co_qualname}()", _IO)
            else:
                name, why, check = entry
                if check is not None and not check(frame.f_locals.get("self")):
                    return
                hit = (name, why)
            guard._judge(hit, frame.f_back)  # pyright: ignore[reportPrivateUsage]

    return profile


class Guard:
    """Watches one call of user code (`where`: `Capability.hook`, as failures name it).

    `active()` installs the profiler for one synchronous step; `violation` is the
    first refused call, kept even if the user code caught the exception.
    """

    __slots__ = ("_profile", "capability", "hook", "violation", "where")

    def __init__(self, where: str, capability: str = "", hook: str = "") -> None:
        self.where = where
        self.capability = capability or where.rpartition(".")[0] or where
        self.hook = hook or where.rpartition(".")[2]
        self.violation: NondeterministicHook | None = None
        self._profile = _profiler(self)

    def _judge(self, hit: _Hit, caller: FrameType | None) -> None:
        """A watched call was made: refuse it if the caller is user code."""
        if caller is None or not is_user_file(caller.f_code.co_filename):
            return
        if hit[1] is _HASH and caller.f_code.co_name == "__hash__":
            return  # hashing for a dict or set: the values never leave the process
        if workflow.unsafe.is_sandbox_unrestricted():
            return
        raise self._refuse(hit, caller)

    def _refuse(self, hit: _Hit, caller: FrameType | None) -> NondeterministicHook:
        touched, (reason, advice) = hit
        where, inside = "an unknown place", ""
        if caller is not None:
            code = caller.f_code
            where = f"{_shown(code.co_filename)}:{caller.f_lineno}"
            inside = "" if code.co_qualname == self.hook else f" in {code.co_qualname}"
        failure = runtime_failure(NondeterministicHook(
            f"{self.where} called {touched} at {where}{inside}, which {reason}. Hook code runs "
            f"as workflow code and must do the same when a run is replayed, on any worker: "
            f"{advice}.",
            capability=self.capability, hook=self.hook, touched=touched, location=where,
        ))
        if self.violation is None:
            self.violation = failure
        return failure

    @contextmanager
    def active(self) -> Generator[None]:
        """Watch the calls of one synchronous step (restoring the previous profiler after)."""
        loop = _running_loop()
        previous = sys.getprofile()
        spawn: Any = None
        if loop is not None:
            spawn = loop.__dict__.get("create_task", _UNSET)
            original = loop.create_task
            loop.create_task = _watched_spawn(original, self)  # pyright: ignore[reportAttributeAccessIssue]
        sys.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(previous)
            if loop is not None:
                if spawn is _UNSET:
                    del loop.create_task
                else:
                    loop.create_task = spawn  # pyright: ignore[reportAttributeAccessIssue]

    def check(self, error: BaseException | None = None) -> None:
        """Raise the refused call, if there was one (over whatever the user code raised).

        Temporal's sandbox refuses some calls itself (`open`, for one, even from code
        imported outside it): such a refusal is reported the same way.
        """
        if self.violation is None and isinstance(error, RestrictedWorkflowAccessError):
            touched = f"{error.qualified_name.removeprefix('__builtins__.')}()"
            self._refuse((touched, ("Temporal's workflow sandbox refuses", _IO[1])),
                         _last_user_frame(error))
        if self.violation is not None:
            raise self.violation from error


_UNSET = object()


def _last_user_frame(error: BaseException) -> FrameType | None:
    """The innermost user frame of `error`'s traceback (where the user code made the call)."""
    found: FrameType | None = None
    tb = error.__traceback__
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            found = tb.tb_frame
        tb = tb.tb_next
    return found


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _watched_spawn(create_task: Callable[..., Any], guard: Guard) -> Callable[..., Any]:
    """`loop.create_task` for the span of a step: tasks user code starts are watched too."""

    def spawn(coro: Any, **kwargs: Any) -> Any:
        if inspect.iscoroutine(coro):
            coro = _watch(coro, guard)
        return create_task(coro, **kwargs)

    return spawn


async def _watch(coro: Coroutine[Any, Any, Any], guard: Guard) -> Any:
    return await _Stepped(coro, guard)


class _Stepped:
    """Awaits `coro`, with the guard active during each of its steps."""

    __slots__ = ("_coro", "_guard")

    def __init__(self, coro: Coroutine[Any, Any, Any], guard: Guard) -> None:
        self._coro = coro
        self._guard = guard

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, guard = self._coro, self._guard
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                with guard.active():
                    yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                guard.check()
                return done.value
            except BaseException as e:
                guard.check(e)
                raise
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - thrown in (a cancellation): passed on
                value, error = None, e


async def guarded(guard: Guard, fn: Callable[..., Any], *args: Any) -> Any:
    """`await fn(*args)` (or its plain result, for a sync function) under `guard`."""
    try:
        with guard.active():
            result = fn(*args)
    except BaseException as e:
        guard.check(e)
        raise
    if inspect.iscoroutine(result):
        return await _Stepped(result, guard)
    if inspect.isawaitable(result):
        result = await result
    guard.check()
    return result


def guarded_sync(guard: Guard, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` under `guard`, for code that must not be async (reducers, validators)."""
    try:
        with guard.active():
            result = fn(*args)
    except BaseException as e:
        guard.check(e)
        raise
    guard.check()
    return result
