"""The manual's shell commands (README.md and docs/**/*.md), run exactly as written.

Every command in a ```sh block of README.md or a docs page is a promise to the user. Tests run them with
`readme(...)` (wait for the exit), `readme_process(...)` (long-running: `towline dev`,
`towline worker`, ...), `readme_stdio(...)` (a stdio MCP server, for the `mcp` SDK's client
to launch) or `readme_pty(...)` (in a terminal, to see what a person sees as it comes),
passing the command text verbatim; all refuse a command the README
does not show, so a test cannot drift from the manual. `test_readme_commands.py` checks the
other direction: every README command is run by some test (found by reading the test
sources), except the few listed in `NOT_RUNNABLE_HERE` with the reason.

Commands run through `bash -c` with this interpreter's scripts directory first on PATH (so
`towline`, `temporal` and `python` are the ones of the venv under test), after the folder of
the launchers that `towline` and `python SCRIPT` are there (`tests/fork_launcher.py`: the
command is forked from the test process's zygote, which has imported towline once;
`TOWLINE_FORK=0` runs the real one). A trailing
`# comment` is not part of a command; `\\` continuations are joined.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from forkserver import launcher_env

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BIN = Path(sys.executable).parent

__all__ = [
    "REPO",
    "README",
    "manual_pages",
    "Done",
    "readme_commands",
    "readme",
    "readme_process",
    "readme_stdio",
    "stop_process",
    "read_until",
    "cli_env",
    "readme_pty",
    "Terminal",
]


@dataclass
class Done:
    """A finished command."""

    code: int
    out: str
    err: str


def _strip_comment(line: str) -> str:
    """`line` without a trailing shell comment (a `#` after whitespace, outside quotes)."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def manual_pages() -> tuple[Path, ...]:
    """The README and every page of the docs site (`docs/**/*.md`), in a stable order."""
    return (README, *sorted((REPO / "docs").rglob("*.md")))


@cache
def readme_commands() -> tuple[str, ...]:
    """Every command in the ```sh blocks of the README and the docs pages, in order."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in manual_pages())
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        joined = re.sub(r"[ \t]*\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = _strip_comment(line.strip())
            if command:
                commands.append(command)
    return tuple(commands)


def cli_env(address: str | None = None, namespace: str = "default",
            extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for a command: no inherited TEMPORAL_*/TOWLINE_* settings.

    `address` becomes TEMPORAL_ADDRESS (None: unset, the commands' own default). The repo
    is on PYTHONPATH so `examples.*` agents import from any working directory.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TEMPORAL_", "TOWLINE_", "VIRTUAL_ENV"))}
    if address is not None:
        env["TEMPORAL_ADDRESS"] = address
        env["TEMPORAL_NAMESPACE"] = namespace
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    launcher = dict(launcher_env())
    first = [launcher.pop("PATH_FIRST")] if launcher else []
    env["PATH"] = os.pathsep.join([*first, str(BIN), env.get("PATH", "")])
    env.update(launcher)  # `towline` forked from this process's zygote (tests/fork_launcher.py)
    # The seed `towline` would restart itself with (towline/runtime/hashseed.py): set here, each
    # command starts once instead of twice (0.7 s each); tests/test_guard_holes.py runs the
    # restart itself.
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


def _check(command: str) -> None:
    assert command in readme_commands(), (
        f"not a command the README or docs/ show (exactly): {command!r}"
    )


async def readme(
    command: str,
    *,
    env: Mapping[str, str],
    cwd: Path = REPO,
    timeout: float = 90,
    stdin: str | None = None,
) -> Done:
    """Run a README command exactly as written and wait for it."""
    _check(command)
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, cwd=cwd, env=dict(env), start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), timeout
        )
    except TimeoutError:
        stop_process(proc, signal.SIGKILL)
        await proc.wait()
        raise AssertionError(f"{command!r} did not finish within {timeout}s") from None
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


async def readme_process(
    command: str, *, env: Mapping[str, str], cwd: Path = REPO
) -> asyncio.subprocess.Process:
    """Start a long-running README command exactly as written (its own process group)."""
    _check(command)
    return await asyncio.create_subprocess_exec(
        "bash", "-c", command, cwd=cwd, env=dict(env), start_new_session=True,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


def readme_stdio(command: str, *, env: Mapping[str, str], cwd: Path = REPO) -> Any:
    """`StdioServerParameters` that make an MCP client launch a README command exactly as written
    (through `bash -c`, like the others) and speak MCP over its stdin and stdout."""
    _check(command)
    from mcp import StdioServerParameters

    return StdioServerParameters(command="bash", args=["-c", command], env=dict(env), cwd=str(cwd))


def stop_process(proc: asyncio.subprocess.Process, sig: int = signal.SIGINT) -> None:
    """Signal the process group we started (by its id; never by name)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


async def read_until(stream: asyncio.StreamReader | None, marker: str, timeout: float = 90) -> str:
    """Read lines from `stream` until one contains `marker`; returns everything read."""
    assert stream is not None
    seen = ""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while marker not in seen:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"{marker!r} not seen within {timeout}s; got:\n{seen}")
        line = await asyncio.wait_for(stream.readline(), remaining)
        if not line:
            raise AssertionError(f"the process ended before {marker!r}; it said:\n{seen}")
        seen += line.decode(errors="replace")
    return seen


class Terminal:
    """A command running in a pseudo-terminal: everything it writes, as it came, with times."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self.chunks: list[tuple[float, str]] = []
        """(loop time, text) of each read from the terminal, in order."""
        self._more = asyncio.Event()
        self._closed = False
        asyncio.get_running_loop().add_reader(master, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the last writer closed: EIO
            data = b""
        if not data:
            self._close()
        else:
            self.chunks.append((asyncio.get_running_loop().time(), data.decode(errors="replace")))
        self._more.set()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            asyncio.get_running_loop().remove_reader(self.master)
            os.close(self.master)

    @property
    def text(self) -> str:
        """Everything written so far (terminal line ends as `\n`)."""
        return "".join(c for _, c in self.chunks).replace("\r\n", "\n")

    async def read_until(self, marker: str, timeout: float = 90) -> str:
        """Wait until the terminal shows `marker`; returns everything shown."""
        async with asyncio.timeout(timeout):
            while marker not in self.text:
                if self._closed:
                    raise AssertionError(f"the command ended before {marker!r}:\n{self.text}")
                self._more.clear()
                await self._more.wait()
        return self.text

    async def wait(self, timeout: float = 90) -> int:
        """Wait for the command to exit (and its output to be read); its exit code."""
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                while not self._closed:
                    self._more.clear()
                    await self._more.wait()
        self._close()
        return code


async def readme_pty(command: str, *, env: Mapping[str, str], cwd: Path = REPO) -> Terminal:
    """Start a README command exactly as written, in a terminal of its own (a pty)."""
    _check(command)
    master, slave = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=cwd, env={**env, "TERM": "xterm"}, start_new_session=True,
            stdin=slave, stdout=slave, stderr=slave,
        )
    finally:
        os.close(slave)
    return Terminal(proc, master)
