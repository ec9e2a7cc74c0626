"""Where a local dev server's UI listens, for the commands run later against that server.

The UI is on the gRPC port + 1000 (7233 -> 8233) unless that port was taken when the server
started, so `towline dev` and the embedded server of `towline run` record their UI here (a
file per gRPC port, in the user's runtime directory, with the server's process id), and
the commands that print UI links (`towline run`, `show`, `eval`, ...) read it. An entry of a
server that is gone is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

__all__ = ["record_ui", "forget_ui", "recorded_ui"]


def _entry(port: int) -> Path | None:
    if not hasattr(os, "getuid"):
        return None  # POSIX only: elsewhere `os.kill(pid, 0)` would end the process it asks about
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"towline-{os.getuid()}" / f"dev-server-{port}.json"


def record_ui(port: int, ui_url: str, pid: int) -> None:
    """Record that the server on `port` (process `pid`) serves its UI at `ui_url`."""
    entry = _entry(port)
    if entry is None:
        return
    with contextlib.suppress(OSError):  # a link is a convenience: never fail a start for it
        entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        entry.write_text(json.dumps({"ui_url": ui_url, "pid": pid}))


def forget_ui(port: int, pid: int) -> None:
    """Remove the entry of the server on `port`, if it is still process `pid`'s."""
    entry = _entry(port)
    if entry is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):  # AttributeError: not a dict
        if json.loads(entry.read_text()).get("pid") == pid:
            entry.unlink()


def recorded_ui(port: int) -> str | None:
    """The UI of the live server on `port` that recorded one, else None."""
    entry = _entry(port)
    if entry is None:
        return None
    try:
        data = json.loads(entry.read_text())
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
