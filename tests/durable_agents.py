"""Agents and tools for the crash and server-restart tests, importable by a worker process.

`tests/worker_main.py` runs a worker for `AGENTS` in a separate process, so these
definitions live in their own module (not in a test file). Every side effect is
counted in files under the directory named by the environment variable
`TOWLINE_TEST_EFFECTS`, keyed by the tool call's idempotency key, so a test can
tell executions (attempts) from effects (what a user would notice twice):

- `exec/<key>`: one line per execution of a tool call (every attempt);
- `effect/<key>`: created once when the call's effect is applied;
- `effects.log`: one line per applied effect;
- `started/<key>`: written by the slow tool once it has applied its effect and
  begun its long work (the test kills the worker when it appears);
- `model/<workflow id>/<step>`: one line per model activity attempt.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.common import RetryPolicy

from towline import Agent, ToolContext, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult

if TYPE_CHECKING:
    from forkserver import ForkedPopen

__all__ = [
    "AGENTS",
    "EFFECTS_ENV",
    "SLOW_ENV",
    "crash_tool_agent",
    "crash_model_agent",
    "effects_dir",
    "executions",
    "effects",
    "model_attempts",
    "WorkerProcess",
    "wait_for_file",
]

EFFECTS_ENV = "TOWLINE_TEST_EFFECTS"
"""Environment variable naming the directory the tools and models count in."""

SLOW_ENV = "TOWLINE_TEST_SLOW_SECONDS"
"""Environment variable: how long the slow tool's first attempt works (default 20 s)."""

SLOW_SECONDS = 20.0
"""How long a hanging first attempt works by default (a crash test kills it long before)."""


def effects_dir() -> Path:
    """The counting directory of this process (set by the test for every worker)."""
    return Path(os.environ[EFFECTS_ENV])


def _key(ctx: ToolContext) -> str:
    return ctx.idempotency_key.replace("/", "__")


def _count_execution(ctx: ToolContext) -> None:
    path = effects_dir() / "exec" / _key(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f"{ctx.tool_name}\n")


def _apply_effect(ctx: ToolContext, label: str) -> bool:
    """Apply the call's effect unless its idempotency key says it was applied; True if applied."""
    marker = effects_dir() / "effect" / _key(ctx)
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    with (effects_dir() / "effects.log").open("a") as f:
        f.write(f"{_key(ctx)} {label}\n")
    return True


@tool
def record(ctx: ToolContext, label: str) -> str:
    """Record `label` (a quick tool with a countable effect)."""
    _count_execution(ctx)
    _apply_effect(ctx, label)
    return f"recorded {label}"


@tool(
    idempotent=True,
    heartbeat_timeout=timedelta(seconds=4),
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=300), maximum_attempts=10),
)
async def slow_effect(ctx: ToolContext, label: str) -> str:
    """Apply an effect, then work for a long time while heartbeating.

    Idempotent: a retry (after a crash) finds the effect applied under the same
    idempotency key and only finishes the work, so the effect happens once.
    """
    _count_execution(ctx)
    applied = _apply_effect(ctx, label)
    if applied:
        started = effects_dir() / "started" / _key(ctx)
        started.parent.mkdir(parents=True, exist_ok=True)
        started.write_text(str(activity.info().attempt))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(os.environ.get(SLOW_ENV, SLOW_SECONDS))
        while loop.time() < deadline:
            activity.heartbeat()
            await asyncio.sleep(0.2)
    return f"slow {label} done"


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def _count_model_attempt(info: ModelInfo) -> None:
    folder = effects_dir() / "model" / (activity.info().workflow_id or "")
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / str(info.run_step)).open("a") as f:
        f.write(f"{activity.info().attempt}\n")


def _call(name: str, label: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool_name=name, args={"label": label})])


def crash_tool_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """`record("first")`, then `slow_effect("second")`, then an answer quoting both returns."""
    _count_model_attempt(info)
    done = _returns(messages)
    if not done:
        return _call("record", "first")
    if len(done) == 1:
        return _call("slow_effect", "second")
    return " | ".join(str(r.content) for r in done)


async def crash_model_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """`record("before")`; the next request hangs on its first attempt; then `record("after")`."""
    _count_model_attempt(info)
    done = _returns(messages)
    if not done:
        return _call("record", "before")
    if len(done) == 1:
        if activity.info().attempt == 1:
            marker = effects_dir() / "model-started" / (activity.info().workflow_id or "")
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("1")
            await asyncio.sleep(SLOW_SECONDS)
        return _call("record", "after")
    return " | ".join(str(r.content) for r in done)


@tool(idempotent=True)
def sleepy_effect(ctx: ToolContext, label: str) -> str:
    """Apply an effect, then (first attempt only) sleep long in its thread: no heartbeat code.

    Sync and silent: the activity's own heartbeats (from the event loop, while the
    thread works) are what let Temporal notice a lost worker in seconds.
    """
    _count_execution(ctx)
    applied = _apply_effect(ctx, label)
    if applied and activity.info().attempt == 1:
        started = effects_dir() / "started" / _key(ctx)
        started.parent.mkdir(parents=True, exist_ok=True)
        started.write_text("1")
        time.sleep(float(os.environ.get(SLOW_ENV, SLOW_SECONDS)))
    return f"sleepy {label} done"


@tool
def once_effect(ctx: ToolContext, label: str) -> str:
    """A non-idempotent tool: applies its effect and, when asked to, then hangs."""
    _count_execution(ctx)
    _apply_effect(ctx, label)
    if label == "hang":
        started = effects_dir() / "started" / _key(ctx)
        started.parent.mkdir(parents=True, exist_ok=True)
        started.write_text(str(activity.info().attempt))
        time.sleep(float(os.environ.get(SLOW_ENV, SLOW_SECONDS)))
    return f"once {label} done"


@tool(retry_policy=RetryPolicy(maximum_attempts=1))
def single_attempt(ctx: ToolContext, label: str) -> str:
    """A non-idempotent tool allowed one attempt only."""
    _count_execution(ctx)
    _apply_effect(ctx, label)
    return f"single {label} done"


@tool(entry_mark=False)
def unmarked_effect(ctx: ToolContext, label: str) -> str:
    """A non-idempotent tool without an entry mark."""
    _count_execution(ctx)
    _apply_effect(ctx, label)
    return f"unmarked {label} done"


def one_call_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Call the tool the prompt names with the label the prompt gives (`tool:label`)."""
    done = _returns(messages)
    if done:
        return " | ".join(f"{r.status}: {r.content}" for r in done)
    prompt = next(p.text for m in messages if isinstance(m, ModelRequest)
                  for p in m.parts if isinstance(p, UserPart))
    name, label = prompt.split(":", 1)
    return _call(name, label)


heartbeat_agent = Agent(
    name="durable-heartbeat",
    model=FunctionModel(one_call_script, model_name="durable-heartbeat-model"),
    tools=[sleepy_effect, once_effect, single_attempt, unmarked_effect],
    tool_heartbeat_timeout=timedelta(seconds=4),
)
"""One tool call named by the prompt (`sleepy_effect:x`, `once_effect:hang`, ...); a lost
worker is noticed after 4 s of missing heartbeats, not after the 5-minute call timeout."""

crash_tool_agent = Agent(
    name="durable-crash-tool",
    model=FunctionModel(crash_tool_script, model_name="durable-crash-tool-model"),
    tools=[record, slow_effect],
)
"""A run whose second tool is slow: the worker is killed while it runs."""

crash_model_agent = Agent(
    name="durable-crash-model",
    model=FunctionModel(crash_model_script, model_name="durable-crash-model-model"),
    tools=[record],
    model_timeout=timedelta(seconds=3),
    model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=300), maximum_attempts=10),
)
"""A run whose second model request hangs: the worker is killed during the model activity."""

AGENTS = [crash_tool_agent, crash_model_agent, heartbeat_agent]
"""Every agent `tests/worker_main.py` serves."""


def executions(root: Path) -> dict[str, int]:
    """Executions (attempts) per tool call key."""
    folder = root / "exec"
    if not folder.is_dir():
        return {}
    return {p.name: len(p.read_text().splitlines()) for p in folder.iterdir()}


def effects(root: Path) -> dict[str, int]:
    """Applied effects per tool call key (from the effects log)."""
    log = root / "effects.log"
    counts: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            key = line.split(" ", 1)[0]
            counts[key] = counts.get(key, 0) + 1
    return counts


def model_attempts(root: Path, workflow_id: str) -> dict[int, int]:
    """Model activity attempts per run step of one run."""
    folder = root / "model" / workflow_id
    if not folder.is_dir():
        return {}
    return {int(p.name): len(p.read_text().splitlines()) for p in folder.iterdir()}


WORKER_MAIN = Path(__file__).with_name("worker_main.py")


class WorkerProcess:
    """`tests/worker_main.py` as a child process that a test can SIGKILL and replace."""

    def __init__(self, address: str, task_queue: str, root: Path, namespace: str = "default",
                 die_before: str | None = None, agents: str = "durable_agents:AGENTS") -> None:
        self.die_before = die_before
        self.address = address
        self.agents = agents
        self.task_queue = task_queue
        self.root = root
        self.namespace = namespace
        self.log_path = root / f"worker-{task_queue}.log"
        self._process: subprocess.Popen[bytes] | ForkedPopen | None = None

    def start(self) -> None:
        """Launch a fresh worker process (counting under `root`), forked from the test
        process's zygote where it can be (`forkserver`: the same script in a process of its own,
        without a fresh interpreter's imports)."""
        from forkserver import script_process

        env = {**os.environ, EFFECTS_ENV: str(self.root)}
        args = ["--address", self.address, "--task-queue", self.task_queue,
                "--namespace", self.namespace, "--agents", self.agents]
        if self.die_before:
            args += ["--die-before", self.die_before]
        with self.log_path.open("ab") as log:
            self._process = script_process(WORKER_MAIN, args, env=env, cwd=Path.cwd(),
                                           output=log.fileno())

    def kill(self) -> None:
        """SIGKILL the worker (a crash: nothing is flushed or completed) and reap it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        self._process = None

    def wait(self, timeout: float = 60) -> int:
        """Wait for the worker to exit on its own; its exit code."""
        assert self._process is not None
        return self._process.wait(timeout)

    def log(self) -> str:
        """Everything the worker processes printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


async def wait_for_file(folder: Path, timeout: float = 30.0) -> Path:
    """The first file that appears in `folder`; raises `TimeoutError` after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            found = sorted(folder.iterdir()) if folder.is_dir() else []
            if found:
                return found[0]
            await asyncio.sleep(0.05)


def call_keys(result: RunResult) -> list[str]:
    """The idempotency keys (as effect file names) of a run's tool calls, in order."""
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    return [
        f"{result.run_id}__{step}__{c.tool_call_id}"
        for step, m in enumerate(responses, start=1) for c in m.tool_calls
    ]
