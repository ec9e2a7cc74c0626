"""npm packages for tests of clients written in JavaScript or TypeScript (the official
`@temporalio/client`, `@ag-ui/client`, ...): installed from the npm registry into a cached
folder, once per set of packages, and reused by every later test and test session.

`npm_folder("@temporalio/client", "typescript")` returns a folder whose ``node_modules``
holds those packages; `node_project(tmp_path, folder)` makes a test's own folder that
resolves them (a ``node_modules`` link), so tests never write into the shared cache. Node
and npm missing skip the test with how to install them (fail it under ``CI=true``,
`machine_tools`); an install that fails is a test failure, with npm's own words.

The cache is ``$TOWLINE_NPM_CACHE`` or ``~/.cache/towline-tests/npm``, one folder per set of
packages; an exclusive lock per folder serialises concurrent sessions (two xdist workers,
two checkouts), and a marker written after a complete install makes a half-done one count
as absent.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from machine_tools import NODE_HINT, require_program

__all__ = ["npm_folder", "npm_lock", "node_project", "node_env", "NPM_TIMEOUT"]

NPM_TIMEOUT = 300.0
"""Seconds one `npm install` may take (a cold cache downloads a few MB)."""
_MARKER = "towline-installed.json"


def _cache_root() -> Path:
    configured = os.environ.get("TOWLINE_NPM_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "towline-tests" / "npm"


def node_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for `npm` and `node`: quiet (no audit, funding or update notices)."""
    env = dict(os.environ)
    env.update({"npm_config_audit": "false", "npm_config_fund": "false",
                "npm_config_update_notifier": "false", "npm_config_loglevel": "error"})
    env.update(extra or {})
    return env


@cache
def _installed(packages: tuple[str, ...]) -> Path:
    npm = require_program("npm", NODE_HINT)
    require_program("node", NODE_HINT)
    digest = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16]
    folder = _cache_root() / digest
    folder.mkdir(parents=True, exist_ok=True)
    with npm_lock(folder):
        marker = folder / _MARKER
        if marker.exists() and json.loads(marker.read_text()) == list(packages):
            return folder
        (folder / "package.json").write_text(json.dumps(
            {"name": f"towline-tests-{digest}", "private": True, "type": "module"}))
        done = subprocess.run([npm, "install", "--prefer-offline", *packages],
                              cwd=folder, env=node_env(), capture_output=True, text=True,
                              timeout=NPM_TIMEOUT, check=False)
        if done.returncode != 0:
            raise AssertionError(f"npm install {' '.join(packages)} failed "
                                 f"({done.returncode}):\n{done.stderr[-3000:]}")
        marker.write_text(json.dumps(list(packages)))
    return folder


@contextmanager
def npm_lock(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock (another session may be installing into it): for a test that runs
    an `npm` command of the docs in the folder itself."""
    with open(folder.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def npm_folder(*packages: str) -> Path:
    """A folder whose ``node_modules`` holds `packages` (npm specs: ``name`` or
    ``name@version``), installed once and cached (see the module docstring)."""
    return _installed(tuple(sorted(packages)))


def node_project(where: Path, folder: Path) -> Path:
    """`where` made a Node project (ES modules) that resolves the packages of `folder`
    (from `npm_folder`) through a ``node_modules`` link; returns `where`."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "package.json").write_text(json.dumps({"private": True, "type": "module"}))
    link = where / "node_modules"
    if not link.exists():
        link.symlink_to(folder / "node_modules", target_is_directory=True)
    return where
