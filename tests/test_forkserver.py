"""The tests' fork server gives a command what a fresh interpreter would: the same exit codes,
output, environment, working directory, `sys.path`, and signals (`tests/forkserver.py`).

Each check runs the same thing both ways (a fresh `python` and a child of the zygote) and
compares what a test would see, so a difference would show here before it hid in another test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cli_helpers import alive, towline_process
from forkserver import ForkedPopen, ForkedProcess, forked_script, forked_towline
from readme import REPO, cli_env, read_until

PROBE = """\
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "path": sys.path[:2],
                  "probe": os.environ.get("PROBE"), "seed": os.environ.get("PYTHONHASHSEED"),
                  "stdin": sys.stdin.read()}))
sys.exit(int(sys.argv[1]))
"""


def _probe(script: Path, args: list[str], env: dict[str, str], cwd: Path, forked: bool) -> tuple[int, dict[str, object]]:
    out = cwd / f"out-{forked}.txt"
    with out.open("wb") as sink:
        if forked:
            proc = forked_script(script, args, env=env, cwd=cwd, stdout=sink.fileno(),
                                 stderr=sink.fileno())
            assert isinstance(proc, ForkedPopen)
        else:
            proc = subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
        code = proc.wait(60)
    return code, json.loads(out.read_text())


def test_a_forked_script_sees_what_a_fresh_one_sees(tmp_path: Path) -> None:
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    script.write_text(PROBE)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PROBE": "here", "PYTHONHASHSEED": "0",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    fresh = _probe(script, ["3", "x y"], env, work, forked=False)
    forked = _probe(script, ["3", "x y"], env, work, forked=True)
    assert fresh == forked
    assert fresh[0] == 3 and fresh[1]["path"] == [str(script.parent), str(tmp_path)]


def test_a_script_under_another_seed_is_not_forked(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    assert forked_script(tmp_path / "probe.py", [], env=env, cwd=tmp_path, stdout=1, stderr=2) is None


async def _both(*args: str, env: dict[str, str], cwd: Path = REPO) -> list[tuple[int, str, str]]:
    seen = []
    for fork in ("0", "1"):
        proc = await towline_process(*args, env={**env, "TOWLINE_FORK": fork}, cwd=cwd)
        assert isinstance(proc, ForkedProcess) == (fork == "1")
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        seen.append((proc.returncode, out.decode(), err.decode()))
    return seen


async def test_a_forked_command_answers_as_a_fresh_one(tmp_path: Path) -> None:
    env = cli_env(None)
    fresh, forked = await _both("--version", env=env)
    assert fresh == forked and fresh[0] == 0 and fresh[1].startswith("towline ")
    fresh, forked = await _both("runs", "--limit", "0", env=env)  # a usage error
    assert fresh == forked and fresh[0] == 2 and "--limit" in fresh[2]
    # an agent module found from the working directory, as `python -m` puts it on sys.path
    (tmp_path / "here_agents.py").write_text("raise SystemExit('imported from the cwd')\n")
    fresh, forked = await _both("worker", "--agent", "here_agents:agent", env={
        **env, "PYTHONPATH": "", "TEMPORAL_ADDRESS": "127.0.0.1:1"}, cwd=tmp_path)
    assert fresh == forked and "imported from the cwd" in fresh[2]


async def test_a_forked_command_is_interrupted_like_a_fresh_one(target: str) -> None:
    env = cli_env(target)
    codes = []
    for fork in ("0", "1"):
        proc = await towline_process("worker", "--agent", "examples.calculator:agent",
                                     "--task-queue", f"fork-{fork}",
                                     env={**env, "TOWLINE_FORK": fork})
        said = await read_until(proc.stderr, "Ctrl-C stops.")
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        codes.append((proc.returncode, "Traceback" in said + err.decode(), out.decode()))
    assert codes[0] == codes[1] and codes[0][1] is False, codes


async def test_a_command_under_another_seed_runs_in_a_fresh_interpreter() -> None:
    env = {**cli_env(None), "TOWLINE_HASH_SEED": "7"}
    assert await forked_towline(("--version",), env=env, cwd=REPO) is None


# --- docs commands: the launcher that `towline` is on their PATH (tests/fork_launcher.py) ---

PROBE_AGENT = """\
import json, os, signal, sys, time
parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "pid": os.getpid(),
                  "forked": "fork_zygote" in parent, "stdin": sys.stdin.read()}), flush=True)
while os.environ.get("PROBE") == "sleep":  # until a signal ends it (whichever thread gets it)
    time.sleep(0.05)
if os.environ.get("PROBE") == "term":
    os.kill(os.getpid(), signal.SIGTERM)
raise SystemExit(int(os.environ.get("PROBE_CODE", "0")))
"""


async def _group(command: str, env: dict[str, str], cwd: Path,
                 stdin: int = asyncio.subprocess.DEVNULL) -> asyncio.subprocess.Process:
    """`command` through `bash -c` in a process group of its own, as `readme_process` runs it."""
    return await asyncio.create_subprocess_exec(
        "bash", "-c", command, env=env, cwd=cwd, start_new_session=True,
        stdin=stdin, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _bash(command: str, env: dict[str, str], cwd: Path, stdin: bytes = b"") -> tuple[int, dict[str, object], str]:
    proc = await _group(command, env, cwd, asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, json.loads(out.decode().splitlines()[0]), err.decode()


async def test_a_docs_command_is_forked_and_answers_as_the_real_one(tmp_path: Path) -> None:
    (tmp_path / "probe_agents.py").write_text(PROBE_AGENT)
    env = {**cli_env(None), "PYTHONPATH": "", "PROBE_CODE": "3"}
    command = "towline worker --agent probe_agents:agent"
    real = await _bash(command, {**env, "TOWLINE_FORK": "0"}, tmp_path, b"typed")
    forked = await _bash(command, env, tmp_path, b"typed")
    assert real[1].pop("forked") is False and forked[1].pop("forked") is True
    for seen in (real[1], forked[1]):
        del seen["pid"]
    assert real == forked  # exit code, argv, cwd, stdin and stderr alike
    assert real[0] == 3 and real[1]["argv"] == [str(Path(sys.executable).parent / "towline"),
                                                "worker", "--agent", "probe_agents:agent"]


async def test_a_forked_docs_command_ends_by_the_signal_that_ends_the_real_one(tmp_path: Path) -> None:
    (tmp_path / "probe_agents.py").write_text(PROBE_AGENT)
    env = {**cli_env(None), "PYTHONPATH": "", "PROBE": "term"}
    command = "towline worker --agent probe_agents:agent"
    real = await _bash(command, {**env, "TOWLINE_FORK": "0"}, tmp_path)
    forked = await _bash(command, env, tmp_path)
    assert real[0] == forked[0] == -signal.SIGTERM
    assert forked[1]["forked"] is True


async def test_a_sigint_to_the_group_stops_a_forked_docs_command_as_the_real_one(target: str) -> None:
    env = cli_env(target)
    ended = []
    for fork in ("0", "1"):
        proc = await _group(f"towline worker --agent examples.calculator:agent --task-queue "
                            f"launch-{fork}", {**env, "TOWLINE_FORK": fork}, REPO)
        try:
            said = await read_until(proc.stderr, "Ctrl-C stops.")
            launched = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
            assert (launched[1] == b"-IS") == (fork == "1"), launched  # the launcher, or not
            os.killpg(proc.pid, signal.SIGINT)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        ended.append((proc.returncode, "Traceback" in said + err.decode(), out.decode(),
                      err.decode().strip().splitlines()[-1:]))
    assert ended[0] == ended[1] and ended[0][0] == 0 and ended[0][1] is False, ended


async def test_a_sigkill_of_the_group_takes_the_forked_docs_command_along(tmp_path: Path) -> None:
    """The forked command is not in the launcher's group: it goes when the launcher goes."""
    (tmp_path / "probe_agents.py").write_text(PROBE_AGENT)
    env = {**cli_env(None), "PYTHONPATH": "", "PROBE": "sleep"}
    proc = await _group("towline worker --agent probe_agents:agent", env, tmp_path)
    assert proc.stdout is not None
    seen = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
    try:
        assert seen["forked"] is True
        os.killpg(proc.pid, signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
        async with asyncio.timeout(10):
            while alive(int(seen["pid"])):
                await asyncio.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(seen["pid"]), signal.SIGKILL)
