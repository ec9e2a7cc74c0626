"""The repository stands alone: no file of it names a document or path outside it.

Users get the repository (or the wheel), nothing beside it, so a page, a docstring or a
comment that sends them to a file next to the checkout sends them nowhere. The reasons
behind a choice are written in the docs themselves (`docs/design.md`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OUTSIDE_NAMES = re.compile(
    r"\.\./shared\b"          # the folder beside the checkout
    r"|\bshared/[A-Z]"        # a document in it, however it is reached
    r"|\bDESIGN\.md\b"        # the design contract kept outside (docs/design.md is ours)
    r"|\bexagent-capabilities\b|\blangex-middleware\b"  # the documents it follows
)
"""Names of what lies outside the repository (written so this file does not contain them)."""

CLIMBING = re.compile(r"(?<![\w./])((?:\.\./)+[\w.-][\w./-]*)")
"""A relative path that climbs out of its folder (`../x`)."""

SKIPPED = ("tests/histories/",)
"""Recorded histories: data written by Temporal, not text anyone reads."""


def _project_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [ROOT / name for name in listed.split("\0")
            if name and not name.startswith(SKIPPED) and (ROOT / name).is_file()
            and not (ROOT / name).is_symlink()]


def _text(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # an image, a binary


def outside_references(path: Path, text: str) -> list[str]:
    """The places in `text` (the content of `path`) that name something outside the repository:
    a name of an outside document anywhere, and in Markdown any `../` path that leaves the
    repository or leads to nothing in it."""
    found = [f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for m in OUTSIDE_NAMES.finditer(text)]
    if path.suffix == ".md":
        for m in CLIMBING.finditer(text):
            target = (path.parent / m.group(1)).resolve()
            inside = target == ROOT or ROOT in target.parents
            if not inside or not target.exists():
                found.append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}")
    return found


def test_no_project_file_names_anything_outside_the_repository() -> None:
    files = _project_files()
    assert any(f.name == "README.md" for f in files) and len(files) > 100
    found: list[str] = []
    for path in files:
        text = _text(path)
        if text is not None:
            found += [f"{path.relative_to(ROOT).parent}/{line}"
                      for line in outside_references(path, text)]
    assert not found, "files that point outside the repository:\n" + "\n".join(found)


def test_the_check_finds_such_references() -> None:
    page = ROOT / "docs" / "page.md"
    outside = "../" + "shared/" + "DESIGN" + ".md"
    assert outside_references(page, f"x\nas `{outside}` requires") == [
        f"page.md:2: {outside[:9]}", "page.md:2: " + outside[10:], f"page.md:2: {outside}"]
    assert outside_references(page, "see [it](../../elsewhere/notes.md)") == [
        "page.md:1: ../../elsewhere/notes.md"]
    assert outside_references(page, "x\nsee [ours](../README.md) and (design.md)") == []
    assert outside_references(ROOT / "towline" / "x.py", "see " + "DESIGN" + ".md here") == [
        "x.py:1: " + "DESIGN" + ".md"]
