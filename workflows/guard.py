"""The determinism guard: user code that towline calls from workflow code runs watched.

Capability and middleware hooks, `wrap_model_call` wrappers, reducers, completion
checks, output validators and `in_workflow` tools are user code that runs as
workflow code, so a replay (after a crash, on another worker) must take exactly the
same path. `AgentRun` runs outside Temporal's sandbox (which restricted nothing in
towline's passed-through code, at a fifth of the worker's CPU), and towline imports agents
once, so this guard gives their code the sandbox's protection and more, cheaply.

While such code runs, `sys.setprofile` watches every call made *from a user frame*
(any file outside the standard library, towline, temporalio and the libraries
towline passes through the sandbox) to the clock (`time.time`, `datetime.now`,
`time.localtime()` without a time, ...), the worker's time zone (`time.localtime(t)`),
process-wide randomness (the `random` module's global instance, an unseeded
`random.Random()`, `SystemRandom`, `secrets`, `os.urandom`, `uuid.uuid1/uuid4`), the
environment (`os.environ`, `os.getenv`, `posix.environ`'s methods), per-process values
(`hash()` outside a `__hash__`, `id()`), other threads (`Thread.start`, executors), and
I/O (`open`, `os.*`, `pathlib.Path` I/O, `io.FileIO`'s methods, `glob`, `linecache`,
`socket`, `ssl`, `subprocess`, `shutil`, `urllib.request`, `http.client`); the
watchlist (`watchlist.py`) has them all. Such a call raises `NondeterministicHook` where
it is made (so the I/O never happens), and the run fails with it even if the hook
swallowed the exception. `workflow.now()`, `workflow.random()` and
`workflow.uuid4()` are Temporal's and pass; `with workflow.unsafe.sandbox_unrestricted():`
lets a call through on purpose, as it does in Temporal's sandbox.

The profiler is installed only while the user code's own steps run (an async hook
is watched each time it is resumed, and so are the tasks it starts); nothing runs
per run start, and towline's own capabilities (whose code is checked in this
repository) are not watched at all (`is_user_code`), except where they call user code
(a `CompletionGate` check). A thread has one profile hook, so a profiler already
there is kept working: a Python one (`sys.setprofile(fn)`, `profile`) is passed every
event while the guard watches and put back after each step; `cProfile`'s is
suspended for the step (the hook's time counts as its caller's) and re-enabled as it
was; any other (a C profiler whose object the guard cannot call) makes the guard step
aside, unwatched. Tracers (`sys.settrace`: coverage.py, pdb) are another hook,
untouched.

Writing to module-level state makes no call either, so around each call of user code the
guard compares a fingerprint of the namespaces the code runs in (`module_state`): a hook that
changes a module's list, dict or counter (state every run on the worker shares) fails the run
with `NondeterministicHook` naming the name.

Calls are all the guard sees: what makes none (iterating a set, subscripting a dict,
calling a type such as `io.FileIO(path)`) it cannot refuse; the README's "Hook code is
workflow code" lists those gaps. (An audit hook could see `io.FileIO` open a file, but
in Python 3.11 a Python audit hook runs on every `frame.f_code` read, which this
profiler makes for each call: the guard would cost a third more.)
"""

from __future__ import annotations

import _lsprof
import asyncio
import builtins
import inspect
import sys
from collections.abc import Callable, Coroutine, Generator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from temporalio import workflow

from towline.errors import NondeterministicHook, runtime_failure
from towline.runtime.escapes import contain
from towline.runtime.heap import paused_gc

from .module_state import Fingerprint, fingerprint
from .watchlist import (
    C_CALLS,
    ENVIRON,
    HASH,
    IO,
    IO_FILES,
    OWNER_KINDS,
    PY_CALLS,
    TIME_ARGS,
    Hit,
    call_args,
    environ_hit,
    is_user_code,
    is_user_file,
    owner_hit,
    shown,
)

__all__ = ["Guard", "guarded", "guarded_sync", "is_user_file", "is_user_code"]


Profile = Callable[[FrameType, Any, Any], object]
_CHAINED = "_towline_chained"  # on a guard's profile function that passes events on: to what


def _profiler(guard: Guard) -> Profile:
    """The profile function of `guard`: it runs for every call, so it rejects fast."""
    # the hot lookups as closure cells; the rare ones (TIME_ARGS, ENVIRON) stay globals, so
    # that each event copies fewer cells into its frame
    c_hit, py_hit, io_module, kinds = C_CALLS.get, PY_CALLS.get, IO_FILES.get, OWNER_KINDS

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            hit = c_hit(arg)
            if hit is None:
                owner = getattr(arg, "__self__", None)
                if owner is builtins:  # len(), isinstance(): the refused ones are in C_CALLS
                    return
                if owner.__class__ not in kinds:
                    if owner is not ENVIRON:
                        return
                    hit = environ_hit(arg)
                else:
                    hit = owner_hit(owner, arg, frame)
                    if hit is None:
                        return
            else:
                given = TIME_ARGS.get(arg)
                if given is not None and call_args(frame) >= given[0]:
                    if given[1] is None:
                        return
                    hit = given[1]
            guard._judge(hit, frame)  # pyright: ignore[reportPrivateUsage]
        elif event == "call":
            code = frame.f_code
            entry = py_hit(code)
            if entry is None:
                module = io_module(code.co_filename)
                if module is None:
                    return
                hit = (f"{module}.{code.co_qualname}()", IO)
            else:
                name, why, check = entry
                if check is not None and not check(frame.f_locals):
                    return
                hit = (name, why)
            guard._judge(hit, frame.f_back)  # pyright: ignore[reportPrivateUsage]

    return profile


def _chained(guard: Guard, first: Profile) -> Profile:
    """`guard`'s profile function, passing each event to `first` (a Python profiler that was
    there before) before it looks at it: that profiler still sees everything."""
    watch = guard._profile  # pyright: ignore[reportPrivateUsage]

    def both(frame: FrameType, event: str, arg: Any) -> None:
        first(frame, event, arg)
        watch(frame, event, arg)

    setattr(both, _CHAINED, first)  # read back from whatever profiler is installed
    return both


class Guard:
    """Watches one call of user code (`where`: `Capability.hook`, as failures name it).

    `active()` installs the profiler for one synchronous step; `violation` is the
    first refused call, kept even if the user code caught the exception.
    """

    __slots__ = ("_profile", "capability", "closing", "hook", "violation", "where")

    def __init__(self, where: str, capability: str = "", hook: str = "") -> None:
        self.where = where
        self.capability = capability or where.rpartition(".")[0] or where
        self.hook = hook or where.rpartition(".")[2]
        self.violation: NondeterministicHook | None = None
        self.closing = False
        """The watched coroutine is being closed (a `GeneratorExit` is the runtime's)."""
        self._profile = _profiler(self)

    def _judge(self, hit: Hit, caller: FrameType | None) -> None:
        """A watched call was made: refuse it if the caller is user code."""
        if caller is None or not is_user_file(caller.f_code.co_filename):
            return
        if hit[1] is HASH and caller.f_code.co_name == "__hash__":
            return  # hashing for a dict or set: the values never leave the process
        if workflow.unsafe.is_sandbox_unrestricted():
            return
        raise self._refuse(hit, caller)

    def _refuse(self, hit: Hit, caller: FrameType | None) -> NondeterministicHook:
        touched, (reason, advice) = hit
        where, inside = "an unknown place", ""
        if caller is not None:
            code = caller.f_code
            where = f"{shown(code.co_filename)}:{caller.f_lineno}"
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
        """Watch the calls of one synchronous step (the thread's profiler kept working)."""
        previous = sys.getprofile()
        profile = self._profile
        if previous is not None and getattr(previous, "__code__", None) is not profile.__code__:
            # not an outer guard's own: one passing events on (to them too), a Python
            # profiler (passed them), cProfile (paused), or a C profiler the guard can
            # neither call nor put back (it steps aside)
            first: Profile | None = getattr(previous, _CHAINED, None)
            if first is None and not isinstance(previous, _lsprof.Profiler):
                if not callable(previous):
                    yield
                    return
                first = previous
            if first is not None:
                profile = _chained(self, first)
        loop = _running_loop()
        spawn: Any = None
        if loop is not None:
            spawn = loop.__dict__.get("create_task", _UNSET)
            original = loop.create_task
            loop.create_task = _watched_spawn(original, self)  # pyright: ignore[reportAttributeAccessIssue]
        # No collection while the guard watches: the collector's callbacks (`gc.callbacks`:
        # hypothesis', an APM's) would run inside the hook's calls and read the clock as if
        # the hook did, failing a run that did nothing wrong.
        with paused_gc():
            sys.setprofile(profile)
            try:
                yield
            finally:
                if previous is None or not isinstance(previous, _lsprof.Profiler):
                    sys.setprofile(previous)
                else:
                    previous.enable()  # cProfile, as it was configured (subcalls, builtins)
                if loop is not None:
                    if spawn is _UNSET:
                        del loop.create_task
                    else:
                        loop.create_task = spawn  # pyright: ignore[reportAttributeAccessIssue]

    def check(self, error: BaseException | None = None) -> None:
        """Raise the refused call, if there was one (over whatever the user code raised).

        Then, for `error`, a `BaseException` user code raised (`SystemExit`, ...): raise it
        contained (`towline.runtime.escapes`), so it fails the run, not the worker.
        """
        if self.violation is not None:
            raise self.violation from error
        if error is not None and (contained := contain(error, closing=self.closing)) is not None:
            raise contained from error


_UNSET = object()


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
                guard.closing = True
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - thrown in (a cancellation): passed on
                value, error = None, e


async def guarded(guard: Guard, fn: Callable[..., Any], *args: Any) -> Any:
    """`await fn(*args)` (or its plain result, for a sync function) under `guard`, failing the
    run if it changed module-level state (`module_state`)."""
    before = fingerprint(fn)
    try:
        result = _guarded(guard, fn, *args)
        if inspect.iscoroutine(result):
            result = await _Stepped(result, guard)
        elif inspect.isawaitable(result):  # a task it started: watched by `_watched_spawn`
            result = await result
            guard.check()
    except Exception as e:
        _state_unchanged(guard, before, e)
        raise
    _state_unchanged(guard, before)
    return result


def guarded_sync(guard: Guard, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` under `guard`, for code that must not be async (reducers, validators)."""
    before = fingerprint(fn)
    try:
        result = _guarded(guard, fn, *args)
    except Exception as e:
        _state_unchanged(guard, before, e)
        raise
    _state_unchanged(guard, before)
    return result


def _state_unchanged(guard: Guard, before: Fingerprint | None,
                     raised: Exception | None = None) -> None:
    """Fail the run if the hook changed module-level state since `before`, unless
    the guard refused the call already (that refusal comes first)."""
    if before is None or (raised is not None and guard.violation is not None):
        return
    before.check(guard.where, guard.capability, guard.hook, raised)


def _guarded(guard: Guard, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` with the profiler watching (a coroutine it returns is not stepped yet)."""
    try:
        with guard.active():
            result = fn(*args)
    except BaseException as e:
        guard.check(e)
        raise
    guard.check()
    return result
