"""Where a local dev server's UI listens, for the commands run later against that server.

The UI is on the gRPC port + 1000 (7233 -> 8233) unless that port was taken when the server
started, so `towline dev` and the embedded server of `towline run` record their UI here (a
file per gRPC port, in a folder only the user can write, with the server's process id), and
the commands that print UI links (`towline run`, `show`, `eval`, ...) read it. An entry of a
server that is gone is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["record_ui", "forget_ui", "recorded_ui"]


def _folder() -> Path | None:
    """The user's own folder for the entries: `$XDG_RUNTIME_DIR/towline`, else
    `~/.cache/towline/dev-servers` (never the shared temporary folder, where another local
    user could make the folder first and plant links or a fake UI), made private and checked:
    a real directory (no symbolic link), owned by this user, closed to others."""
    if not hasattr(os, "getuid"):
        return None  # POSIX only: elsewhere `os.kill(pid, 0)` would end the process it asks about
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    try:
        folder = Path(runtime) / "towline" if runtime else Path.home() / ".cache" / "towline" / "dev-servers"
        with contextlib.suppress(OSError):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except (OSError, RuntimeError):  # RuntimeError: no home folder
        return None
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)):
        return None
    return folder


def _entry(port: int) -> Path | None:
    folder = _folder()
    return None if folder is None else folder / f"dev-server-{port}.json"


def record_ui(port: int, ui_url: str, pid: int) -> None:
    """Record that the server on `port` (process `pid`) serves its UI at `ui_url`."""
    entry = _entry(port)
    if entry is None:
        return
    with contextlib.suppress(OSError):  # a link is a convenience: never fail a start for it
        staged = entry.with_name(f".{entry.name}.{os.getpid()}")
        staged.unlink(missing_ok=True)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps({"ui_url": ui_url, "pid": pid}))
        os.replace(staged, entry)  # replaces a link planted there, never writes through it


def _read(entry: Path) -> object:
    """The entry's JSON, read without following a link, if this user owns it."""
    fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        if os.fstat(f.fileno()).st_uid != os.getuid():
            raise ValueError("not this user's entry")
        return json.loads(f.read())


def forget_ui(port: int, pid: int) -> None:
    """Remove the entry of the server on `port`, if it is still process `pid`'s."""
    entry = _entry(port)
    if entry is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):  # AttributeError: not a dict
        data: object = _read(entry)
        if isinstance(data, dict) and data.get("pid") == pid:  # pyright: ignore[reportUnknownMemberType]
            entry.unlink()


def recorded_ui(port: int) -> str | None:
    """The UI of the live server on `port` that recorded one, else None."""
    entry = _entry(port)
    if entry is None:
        return None
    try:
        data: Any = _read(entry)
        pid, url = data["pid"], data["ui_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not isinstance(url, str):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return url
