"""Every command the README shows, run as a subprocess exactly as written, against live servers.

`tests/readme.py` refuses a command the README does not show; the first test here checks the
other direction by reading the test sources: every ```sh command of the README is passed,
verbatim, to `readme(...)`, `readme_process(...)`, `readme_stdio(...)` or `readme_pty(...)`
somewhere in `tests/`. So a README command that no test runs, or a refactor that breaks one,
fails CI.
"""

from __future__ import annotations

import ast
import asyncio
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from readme import (
    REPO,
    cli_env,
    read_until,
    readme,
    readme_commands,
    readme_process,
    stop_process,
)

pytestmark = pytest.mark.heavy

QUICKSTART = ('python3 -m venv .venv && . .venv/bin/activate && pip install -e . && '
              'towline run examples.calculator:agent "What is 6 times 7?"')
TESTS = ("python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && "
         "python -m pytest -q")

NOT_RUNNABLE_HERE = {
    TESTS: "runs this very suite: `.ci/run` runs it exactly as written (checked below)",
}
"""README commands no test can run as a subprocess, each with the reason and what checks it."""


def _exercised() -> set[str]:
    """Command strings passed literally to `readme(...)`/`readme_process(...)`/`readme_pty(...)`."""
    found: set[str] = set()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name not in ("readme", "readme_process", "readme_stdio", "readme_pty"):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
            elif isinstance(first, ast.Name) and first.id in globals():
                found.add(str(globals()[first.id]))
    return found


def test_every_readme_command_is_exercised() -> None:
    commands = readme_commands()
    assert QUICKSTART in commands and TESTS in commands  # the README's first screen
    exercised = _exercised()
    missing = [c for c in commands if c not in exercised and c not in NOT_RUNNABLE_HERE]
    assert not missing, "README commands no test runs as written:\n" + "\n".join(missing)


def test_ci_runs_the_readme_test_command_exactly() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert TESTS in ci.splitlines(), ".ci/run must call the README's test command as written"


def _fresh_copy(dest: Path) -> Path:
    """The repository's files (tracked and new, not ignored) copied to `dest`, as a clone has."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
        capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).symlink_to(source.readlink())
        elif source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


async def test_quickstart_installs_and_runs_in_a_fresh_copy(tmp_path: Path) -> None:
    copy = _fresh_copy(tmp_path / "towline")
    # PIP_NO_COMPILE: pip compiles every installed module (about 5 CPU-s); the run compiles
    # the ones it imports.
    env = cli_env(extra={"PYTHONPATH": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                         "PIP_NO_COMPILE": "1"})
    env["TEMPORAL_ADDRESS"] = "localhost:7233"  # the command's own default, said explicitly
    done = await readme(QUICKSTART, env=env, cwd=copy, timeout=900)
    assert done.code == 0, done
    assert done.out.endswith("6 times 7 is 42.\n"), done.out
    assert "starting an embedded one" in done.err or "task queue towline" in done.err
    assert re.search(r"UI: http://localhost:\d+/namespaces/default/workflows/calculator-", done.err)
    assert (copy / ".venv" / "bin" / "towline").exists()


async def _dev(cwd: Path) -> tuple[asyncio.subprocess.Process, str]:
    """`towline dev` as the README starts it; returns the process and the server address."""
    proc = await readme_process("towline dev --agent examples.calculator:agents",
                                env=cli_env(), cwd=cwd)
    said = await read_until(proc.stderr, "Ctrl-C stops.")
    match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
    assert match, said
    assert "agents: calculator, careful-calculator, calculator-test" in said
    return proc, match.group(1)


async def test_dev_run_show_approve_worker_and_temporal_cli(tmp_path: Path) -> None:
    dev, address = await _dev(tmp_path)
    env = cli_env(address)
    try:
        done = await readme('towline run examples.calculator:agent "What is (2 + 3) * 4?" --id calc-1',
                            env=env, cwd=tmp_path)
        assert done.code == 0, done
        assert done.out == "(2 + 3) * 4 = 20.\n"

        shown = await readme("towline show calc-1", env=env, cwd=tmp_path)
        assert shown.code == 0, shown
        assert "Status    COMPLETED" in shown.out
        assert "evaluate" in shown.out and "20" in shown.out

        # A run that waits for a human, approved from "another terminal".
        waiting = await readme_process(
            'towline run examples.calculator:careful_agent "What is 6 times 7?" --id careful-1',
            env=env, cwd=tmp_path)
        said = await read_until(waiting.stderr, "towline approve careful-1 call_1")
        assert "waiting for approval: multiply(a=6.0, b=7.0)  (call id call_1)" in said
        approved = await readme('towline approve careful-1 call_1 --reason "checked"',
                                env=env, cwd=tmp_path)
        assert approved.code == 0, approved
        assert "approved tool call call_1 in run careful-1" in approved.out
        out, err = await asyncio.wait_for(waiting.communicate(), 60)
        assert waiting.returncode == 0, err
        assert out.decode() == "6 times 7 is 42.\n"

        # A production-style worker, and runs that rely on it.
        worker = await readme_process("towline worker --agent examples.calculator:agent",
                                      env=env, cwd=tmp_path)
        try:
            await read_until(worker.stderr, "Ctrl-C stops.")
            remote = await readme(
                'towline run examples.calculator:agent "What is 6 times 7?" --no-worker',
                env=env, cwd=tmp_path)
            assert remote.code == 0, remote
            assert remote.out == "6 times 7 is 42.\n"
            compose_ui = await readme(
                'TOWLINE_UI_URL=http://localhost:8080 towline run examples.calculator:agent '
                '"What is 6 times 7?" --no-worker', env=env, cwd=tmp_path)
            assert compose_ui.code == 0, compose_ui
            assert "UI: http://localhost:8080/namespaces/default/workflows/calculator-" in compose_ui.err
        finally:
            stop_process(worker, signal.SIGTERM)
            await asyncio.wait_for(worker.wait(), 30)
        assert worker.returncode == 0

        started = await readme(
            "temporal workflow start --type AgentRun --task-queue towline --workflow-id calc-2 "
            "--input '{\"agent\": \"calculator\", \"prompt\": \"What is 6 times 7?\"}'",
            env=env, cwd=tmp_path)
        assert started.code == 0, started
        listed = await readme(
            "temporal workflow list --query 'TowlineStatus = \"waiting\" AND TowlineAgent = "
            "\"calculator\"'", env=env, cwd=tmp_path)
        assert listed.code == 0, listed
        shown = await readme("towline show calc-1", env=env, cwd=tmp_path)
        assert shown.code == 0
    finally:
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 60)
    assert dev.returncode == 0
