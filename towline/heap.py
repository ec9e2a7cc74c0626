"""The worker process's heap: keep Python's full garbage collections short.

Every full collection of Python's cyclic garbage collector scans every object the
process holds, and whichever workflow activation is running meanwhile waits for it:
Temporal's deadlock detector fails an activation that takes over 2 seconds, pause
included. A worker's imports alone (temporalio, pydantic, the providers' SDKs) are
some 100,000 objects that live as long as the process; `settle_heap` moves them out
of the collector's sight once, when the first worker starts.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["settle_heap"]

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
