"""The wheel built from the repository holds the whole `towline` namespace and nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_the_towline_namespace_only(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        check=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("towline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"towline", next(t for t in top if t.endswith(".dist-info"))}
    # The role packages are real files in the wheel (the repo has them as symlinks).
    for module in ("workflows/agent_run.py", "activities/tool.py", "capabilities/base.py",
                   "capabilities/tool_approval.py", "proto/towline/v1/ledger_pb2.py",
                   "proto/towline/v1/ledger.proto", "py.typed", "cli/__init__.py", "cli/runs.py",
                   "cli/mcp.py", "activities/providers/openai_chat.py", "serve/page.html"):
        assert f"towline/{module}" in names, module
    assert not any(n.startswith(("tests/", "examples/", "bench/", "scripts/")) for n in names)
