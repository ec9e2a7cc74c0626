"""Module-level state hook code changes: what the determinism guard's profiler cannot see.

`AgentRun` runs outside Temporal's sandbox and towline imports an agent's module once per
worker process, so a module-level list, dict or counter a hook writes to is shared by every
run on that worker and outlives them: a hook that decides on it (`if not SEEN: ...`) takes
another path when a fresh worker replays the run, and the replay fails on nondeterminism for
good. Writing to such an object makes no call the profiler could refuse, so around each call
of user code the guard takes a fingerprint of the namespaces the code's names resolve in —
its function's module and, for a method, the user classes of its object — and compares it
after the call: which object each name is bound to (a rebinding: `global COUNT; COUNT += 1`,
`type(self).seen = ...`), and for the mutable containers among them (list, dict, set,
bytearray, deque and their subclasses) their length and, for small ones, which objects they
hold. A change fails the run with `NondeterministicHook` naming the name and its module.

Shallow and cheap by design (a few microseconds for a module of a hundred names, against
milliseconds of worker CPU per step): it does not look into objects (a module-level
instance's attributes), another module's globals written by a function of that module, a
closure's cells, or large containers changed in place without changing length. A memo of
a pure function kept with `functools.cache` is not module state to it (the cache lives
inside the wrapper), and pytest test modules are not checked (a test observes its hooks
through module-level lists). The change is undone before the run fails, so the worker's later
runs see the module as a fresh worker does. `bench/module_state.py` measures what the
fingerprint costs.
"""

from __future__ import annotations

import functools
import sys
from collections import deque
from collections.abc import Callable, Mapping
from operator import is_
from types import MethodType
from typing import Any, cast

from temporalio import workflow

from towline.errors import NondeterministicHook, runtime_failure

from .watchlist import is_user_file, shown

__all__ = ["Fingerprint", "fingerprint", "module_state_watched"]

_CONTAINERS = (list, dict, set, bytearray, deque)
"""Mutable containers whose contents are compared (subclasses included: Counter, defaultdict)."""
_SMALL = 64
"""Containers up to this length are compared (and put back) item by item; longer ones by length."""

Scope = tuple[str, str, Any, Mapping[str, Any]]
"""A namespace user code runs in: what it is called ("module stuck_agents", "class Pause"),
its file, its owner (the module's dict or the class) and the namespace."""


def module_state_watched() -> bool:
    """Whether module-level state is checked: inside a run."""
    return workflow.in_workflow()


def _contents(value: Any) -> Any:
    """A container's comparable contents: the objects it holds when small, else its length."""
    n = len(value)
    if n > _SMALL:
        return n
    if isinstance(value, set):
        return frozenset(cast(set[Any], value))
    if isinstance(value, dict):
        return (*value, _UNBOUND, *value.values())  # keys, then values  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, bytearray):
        return bytes(value)
    return tuple(value)  # pyright: ignore[reportUnknownArgumentType]


def _same(before: Any, after: Any) -> bool:
    if type(before) is not type(after):
        return False
    if isinstance(before, tuple):  # the same objects, not equal ones: `L[0] = f(L[0])` is a write
        return _identical(before, after)  # pyright: ignore[reportUnknownArgumentType]
    return before == after


def _put_back(value: Any, contents: Any) -> None:
    """Put a container's contents back as they were (a length alone cannot be)."""
    if isinstance(contents, int):
        return
    if isinstance(value, dict):
        n = len(contents) // 2
        value.clear()
        value.update(zip(contents[:n], contents[n + 1:]))  # pyright: ignore[reportUnknownMemberType]
    elif isinstance(value, (set, deque)):
        value.clear()
        value.extend(contents) if isinstance(value, deque) else value.update(contents)  # pyright: ignore[reportUnknownMemberType]
    else:
        value[:] = contents


def _size(value: Any) -> str:
    return f"{len(value)} item{'s' if len(value) != 1 else ''}"


_UNBOUND = object()


_LISTED: dict[int, tuple[Mapping[str, Any], tuple[Any, ...], tuple[str, ...]]] = {}
"""Per namespace (by id): the namespace, the values it held when its containers were last
listed, and their names (listed again once a value differs: a derived cache, the same on
every worker)."""


def _containers(space: Mapping[str, Any], values: tuple[Any, ...]) -> tuple[str, ...]:
    """The names in `space` bound to mutable containers (cached while its values are the same)."""
    listed = _LISTED.get(id(space))
    if listed is not None and listed[0] is space and _identical(listed[1], values):
        return listed[2]
    names = tuple(name for name, value in space.items()
                  if isinstance(value, _CONTAINERS) and not name.startswith("__"))
    _LISTED[id(space)] = (space, values, names)
    return names


def _identical(before: tuple[Any, ...], after: tuple[Any, ...]) -> bool:
    return len(before) == len(after) and all(map(is_, before, after))


class Fingerprint:
    """The bindings of a hook's scopes and the contents of their containers, before a call."""

    __slots__ = ("_scopes",)

    def __init__(self, scopes: tuple[Scope, ...]) -> None:
        self._scopes = [(label, file, owner, space, tuple(space), values,
                         [(name, space[name], _contents(space[name]))
                          for name in _containers(space, values)])
                        for label, file, owner, space in scopes
                        for values in (tuple(space.values()),)]

    def changes(self, undo: bool = False) -> list[tuple[str, str, str]]:
        """What changed since the fingerprint: (the name in its scope, how, the file) each;
        with `undo`, put back as it was (bindings, and the contents of small containers)."""
        found: list[tuple[str, str, str]] = []
        for label, file, owner, space, names, values, containers in self._scopes:
            for name, value, contents in containers:
                if space.get(name, _UNBOUND) is value and not _same(contents, _contents(value)):
                    how = (f"the {type(value).__name__} it is bound to was changed in place (it "
                           f"has {_size(value)})")
                    found.append((f"`{name}` of {label}", how, file))
                    if undo:
                        _put_back(value, contents)
            if _identical(values, tuple(space.values())) and names == tuple(space):
                continue
            bindings = dict(zip(names, values))
            for name in dict.fromkeys((*bindings, *space)):
                old, new = bindings.get(name, _UNBOUND), space.get(name, _UNBOUND)
                if old is new or name.startswith("__"):
                    continue
                how = ("it was bound for the first time" if old is _UNBOUND
                       else "it was deleted" if new is _UNBOUND else "it was bound to another value")
                found.append((f"`{name}` of {label}", how, file))
                if undo:
                    _rebind(owner, name, old)
        return found

    def check(self, where: str, capability: str, hook: str,
              error: BaseException | None = None) -> None:
        """Raise `NondeterministicHook` (a run failure) if the hook changed its scopes' state,
        over `error` (what the hook raised), if any. The change is undone first, so that the
        worker's next runs see the module as a fresh worker's replay of them does."""
        found = self.changes(undo=True)
        if not found:
            return
        touched, how, file = found[0]
        raise runtime_failure(NondeterministicHook(
            f"{where} changed module-level state {touched}: {how}. Such state is shared by "
            f"every run on a worker and outlives them, so a fresh worker replaying a run takes "
            f"another path and the replay fails for good: keep per-run state in state_schema "
            f"keys (contributed state, which runs persist and replay), configuration on the "
            f"capability, a memo of a pure function in functools.cache.",
            capability=capability, hook=hook, touched=f"module-level state {touched}",
            location=file,
        )) from error


def _rebind(owner: Any, name: str, value: Any) -> None:
    if isinstance(owner, type):
        if value is _UNBOUND:
            delattr(owner, name)
        else:
            setattr(owner, name, value)
    elif value is _UNBOUND:
        del owner[name]
    else:
        owner[name] = value


def fingerprint(fn: Callable[..., Any]) -> Fingerprint | None:
    """A fingerprint of the user scopes `fn` runs in (None outside a run, or when they are
    not user code)."""
    if not module_state_watched():
        return None
    scopes = _scopes(fn)
    return Fingerprint(scopes) if scopes else None


def _scopes(fn: Any) -> tuple[Scope, ...]:
    owner: Any = None
    while True:
        if isinstance(fn, MethodType):
            owner, fn = fn.__self__, fn.__func__
            continue
        inner: Any = getattr(fn, "__wrapped__", None)
        if inner is None and isinstance(fn, functools.partial):
            inner = cast(functools.partial[Any], fn).func
        if inner is None:
            break
        fn = inner
    found = cast(Any, fn)
    code = getattr(found, "__code__", None)
    if code is None:
        return ()
    return _scopes_of(code.co_filename, getattr(found, "__globals__", None),
                      owner if isinstance(owner, type) else type(owner) if owner is not None else None)


@functools.lru_cache(maxsize=1024)
def _watched_file(file: str) -> str | None:
    """`file` as a failure shows it when module state in it is checked, else None (cached: it
    is asked on every hook call, and `shown` reads the working directory). Checked: user code,
    except a pytest test module (`test_*.py`, `*_test.py`, `conftest.py`), where module-level
    lists are how a test observes the hooks it runs on an in-process worker; the agent modules
    workers serve are checked."""
    name = file.rpartition("/")[2].rpartition("\\")[2]
    if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
        return None
    return shown(file) if is_user_file(file) else None


@functools.lru_cache(maxsize=512)
def _user_classes(cls: type) -> tuple[Scope, ...]:
    found: list[Scope] = []
    for c in cls.__mro__:
        module = sys.modules.get(c.__module__)
        file = getattr(module, "__file__", None)
        watched = _watched_file(file) if isinstance(file, str) else None
        if watched is not None:
            found.append((f"class {c.__qualname__}", watched, c, c.__dict__))
    return tuple(found)


def _scopes_of(file: str, space: dict[str, Any] | None, cls: type | None) -> tuple[Scope, ...]:
    scopes: list[Scope] = []
    watched = _watched_file(file) if space is not None else None
    if space is not None and watched is not None:
        scopes.append((f"module {space.get('__name__', '?')}", watched, space, space))
    if cls is not None and cls is not type(None):
        scopes.extend(_user_classes(cls))
    return tuple(scopes)
