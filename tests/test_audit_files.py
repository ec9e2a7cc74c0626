"""Local files another user of the machine could plant are never written through or believed.

The UI registry kept its entries in the shared temporary folder (`/tmp/towline-<uid>/`),
which another local user can make first, with a symlink `towline dev` then wrote through, or
a fake UI URL the link-printing commands believed; `.towline/lock` as a symlink made
`towline run` truncate its target.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from towline.devserver import StateDirInUse, StateLock
from towline.devserver.ui_registry import forget_ui, record_ui, recorded_ui

PORT = 47321


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared temporary folder, and a home of the user's own; no runtime folder."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o1777)
    return tmp_path / "tmp"


def test_the_ui_registry_never_writes_through_a_planted_link(shared: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    planted = shared / f"towline-{os.getuid()}"
    planted.mkdir()
    (planted / f"dev-server-{PORT}.json").symlink_to(victim)
    record_ui(PORT, "http://127.0.0.1:8999", os.getpid())
    assert victim.read_text() == "precious"
    assert recorded_ui(PORT) == "http://127.0.0.1:8999"  # recorded, in the user's own folder
    forget_ui(PORT, os.getpid())
    assert recorded_ui(PORT) is None


def test_the_ui_registry_believes_no_planted_entry(shared: Path, tmp_path: Path) -> None:
    planted = shared / f"towline-{os.getuid()}"
    planted.mkdir()
    (planted / f"dev-server-{PORT}.json").write_text(
        f'{{"ui_url": "http://evil.example/phish", "pid": {os.getpid()}}}')
    assert recorded_ui(PORT) is None
    own = tmp_path / "home" / ".cache" / "towline" / "dev-servers"
    own.mkdir(parents=True, mode=0o700, exist_ok=True)
    (own / f"dev-server-{PORT}.json").symlink_to(planted / f"dev-server-{PORT}.json")
    assert recorded_ui(PORT) is None  # a link in the user's folder is not followed either
    own.chmod(0o777)  # a folder others may write in is not used at all
    record_ui(PORT, "http://127.0.0.1:8999", os.getpid())
    assert recorded_ui(PORT) is None


def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    state = tmp_path / ".towline"
    state.mkdir()
    (state / "lock").symlink_to(victim)
    with pytest.raises(StateDirInUse, match="symbolic link"):
        StateLock(state).acquire()
    assert victim.read_text() == "precious"
