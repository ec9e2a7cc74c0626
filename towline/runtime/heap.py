"""The worker process's heap: keep Python's full garbage collections short.

Every full collection of Python's cyclic garbage collector scans every object the
process holds, and whichever workflow activation is running meanwhile waits for it:
Temporal's deadlock detector fails an activation that takes over 2 seconds, pause
included. A worker's imports alone (temporalio, pydantic, the providers' SDKs) are
some 100,000 objects that live as long as the process; `settle_heap` moves them out
of the collector's sight once, when the first worker starts. `paused_gc` keeps the
collector off while a large value (a continued run's conversation) is built.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Generator

__all__ = ["settle_heap", "paused_gc"]

_lock = threading.Lock()
_settled = [False]


def settle_heap() -> bool:
    """Collect once, then freeze what survives (`gc.freeze`): the process's imports and
    long-lived setup are no longer scanned by later collections. Once per process; returns
    whether this call did it.

    Frozen objects are still freed by reference counting; only a cycle among them that
    becomes garbage later would stay, which is why this runs at worker start, when what is
    alive is what the process keeps.
    """
    with _lock:
        if _settled[0]:
            return False
        _settled[0] = True
    gc.collect()
    gc.freeze()
    return True


_gc_lock = threading.Lock()
_gc_pauses = [0, False]  # active pauses, and whether the collector was enabled before the first


@contextlib.contextmanager
def paused_gc() -> Generator[None]:
    """Pause Python's cyclic garbage collector while a large value is built.

    Building a long conversation (a continued run's carried messages: 20,000 messages
    are some 100,000 objects) triggers full collections that scan every object the
    worker holds, over and over: with the collector on, validating them took 5x
    as long, enough to trip the workflow deadlock detector on a loaded worker.
    Reference counting still frees everything as usual. Pauses nest and may overlap
    across threads; the collector is re-enabled when the last one ends, if it was on.
    """
    with _gc_lock:
        if _gc_pauses[0] == 0:
            _gc_pauses[1] = gc.isenabled()
            gc.disable()
        _gc_pauses[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses[0] -= 1
            if _gc_pauses[0] == 0 and _gc_pauses[1]:
                gc.enable()
