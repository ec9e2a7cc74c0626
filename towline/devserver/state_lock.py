"""The lock on a dev server's state folder, so two servers never share one SQLite file."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Self

__all__ = ["StateLock", "StateDirInUse", "UnsafeLockFile"]


class StateDirInUse(RuntimeError):
    """Another towline process (and its Temporal server) holds this state folder."""

    def __init__(self, state_dir: Path, holder: str) -> None:
        super().__init__(f"the state folder {state_dir} is in use by {holder}; stop it first "
                         "(or give another --state-dir)")
        self.state_dir = state_dir
        self.holder = holder


class UnsafeLockFile(StateDirInUse):
    """The state folder's `lock` is a symbolic link: towline does not write through it."""

    def __init__(self, path: Path) -> None:
        RuntimeError.__init__(self, f"{path} is a symbolic link, not towline's lock file; "
                              "remove it (or give another --state-dir)")
        self.state_dir = path.parent
        self.holder = "a symbolic link"


class StateLock:
    """An exclusive lock on a state folder, so two servers never share one SQLite file.

    `flock` on `<state_dir>/lock`, which holds the owner's pid. The lock is released
    when its holders close it or die (the kernel drops it), so a SIGKILLed owner
    leaves no stale lock; the server child inherits it (`fileno()` in `pass_fds`), so
    a server that outlived its owner would still keep a second one off its database.
    """

    FILENAME = "lock"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / self.FILENAME
        self._fd: int | None = None

    def acquire(self) -> Self:
        """Take the lock, or raise `StateDirInUse` naming the holder's pid."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:  # never through a symlink: the lock's truncation would empty its target
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise UnsafeLockFile(self.path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise StateDirInUse(self.state_dir, holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid()}).encode())
        self._fd = fd
        return self

    def fileno(self) -> int:
        """The locked file's descriptor (to hand to a child process)."""
        if self._fd is None:
            raise RuntimeError("the state lock is not held")
        return self._fd

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(data['pid'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
