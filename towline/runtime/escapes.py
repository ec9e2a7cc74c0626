"""User code's `BaseException`s, contained: they fail the run, never the worker.

`SystemExit` (argparse's `--limit lots` in a hook), `KeyboardInterrupt`, `GeneratorExit`, a
bare `BaseException` or an `asyncio.CancelledError` that no one asked for, let out of a hook or
a tool, reach places that only expect `Exception`s: asyncio ends the worker's event loop on
`SystemExit` and `KeyboardInterrupt` (the process lives on serving nothing, or exits, and every
restarted worker takes the same task again: a poison pill), and the others end a workflow task
with no command, leaving the run running with nothing pending, or fail it as cancelled by a
client. Every place that calls user code (the determinism guard's `guarded` and
`guarded_sync`, which every hook, reducer, validator, completion check and in-workflow tool
goes through, and the tool activity) turns such an exception into `UserCodeExit`, an ordinary
exception the run's typed failures are made from, and lets through only what the runtime
itself raised: a cancellation it asked for (the current task is being cancelled: a client
cancelled the run or the activity, the worker is evicting the workflow or shutting down),
a `GeneratorExit` closing the coroutine, or temporalio's own control-flow exceptions.
"""

from __future__ import annotations

import asyncio

__all__ = ["UserCodeExit", "contain", "raised_name"]


class UserCodeExit(Exception):
    """A `BaseException` (not an `Exception`) that user code raised, carried as an ordinary one.

    `kind` is the original's type name (`SystemExit`), which failures name.
    """

    def __init__(self, error: BaseException) -> None:
        self.kind = type(error).__name__
        super().__init__(str(error) or repr(error))


def _cancelling() -> bool:
    """Whether the running task has been asked to cancel (by the runtime, not by user code
    raising `CancelledError` itself)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a sync tool's thread
        return False
    return task is not None and task.cancelling() > 0


def contain(error: BaseException, *, closing: bool = False) -> UserCodeExit | None:
    """`UserCodeExit` for a `BaseException` user code raised; None for what passes on as it is.

    An `Exception` passes (it is handled where it is caught), and so does what the runtime
    raised: a `CancelledError` while the current task is being cancelled, a `GeneratorExit`
    when the caller knows the coroutine is being closed (`closing`), and temporalio's own
    `BaseException`s (a workflow being evicted, a local activity's backoff).
    """
    if isinstance(error, Exception):
        return None
    if isinstance(error, asyncio.CancelledError) and _cancelling():
        return None
    if isinstance(error, GeneratorExit) and closing:
        return None
    if type(error).__module__.split(".")[0] == "temporalio":
        return None
    return UserCodeExit(error)


def raised_name(error: BaseException) -> str:
    """The name of what user code raised: the original's type for a contained one."""
    return error.kind if isinstance(error, UserCodeExit) else type(error).__name__
