"""Programs some tests need from the machine rather than from pip: found, or skipped with how
to install them, except under ``CI=true`` (CI installs them: there a missing one fails).

The README's test command runs on a fresh machine, where a browser or Node may be missing.
Such a test is then reported as skipped (``pytest -rs`` lists the reason: one line saying what
to install), never failed for the machine's sake; in CI (``.ci/run`` installs Chromium, and
Node is on the image) nothing may hide behind a skip, so the same absence is a failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["in_ci", "require_program", "CHROMIUM_HINT", "NODE_HINT", "chromium_path"]

CHROMIUM_HINT = ("install Chromium to run the browser tests: `sudo apt-get install chromium` "
                 "(Debian/Ubuntu; .ci/run does it) or put a `chromium` on PATH")
"""How to get the browser the page tests drive (Playwright uses the system's Chromium)."""
NODE_HINT = ("install Node.js 18+ with npm to run the JavaScript client tests: "
             "`sudo apt-get install nodejs npm` (Debian/Ubuntu)")
"""How to get Node and npm (the tests of clients written in JavaScript or TypeScript)."""


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``, as `.ci/run` is started): nothing may skip there."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_program(name: str, hint: str) -> str:
    """The path of program `name` on PATH; if there is none, skip the test with `hint`, or
    fail it under CI."""
    found = shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not installed: {hint}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: a test that needs it must not skip)", pytrace=False)
    pytest.skip(message)


def chromium_path() -> str:
    """Debian's `chromium` (what Playwright drives in these tests), or skip/fail as above."""
    return require_program("chromium", CHROMIUM_HINT)
