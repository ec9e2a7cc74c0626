"""The files one model turn passes through (issue 41: 13 before 1.0, the goal 7 or fewer).

An agent whose model answers with text (`FunctionModel`, no tools, no capabilities) runs
on a worker in this process against a dev server in memory (`harness.memory_server`). A
profile hook in every thread (`sys.setprofile`, `threading.setprofile`: the workflow's
thread and the event loop the model activity runs on) records the file of every Python
function of the towline package called from the moment the workflow enters `run_turn` to
the moment it returns, whatever else the worker runs meanwhile (the payload converter,
the interceptors, the model activity). Files are named by their real path, so
`workflows/`, `activities/` and `capabilities/` (symlinked into `towline/`) count once. A
first run warms the process up (imports, caches, connections); the second run's turn is
the one measured.

    python bench/turn_files.py          # the files by folder, and the two figures
    python bench/turn_files.py --json

Two figures: every towline file the turn touched (modules of shared types such as
`towline/messages.py` count: their validators and methods run too), and the engine's
files alone (`workflows/`, `activities/`, `towline/runtime/`).
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from harness import finish, memory_server
from temporalio.client import Client

import towline
from towline import Agent
from towline.client import run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.runtime.hashseed import pin_hash_seed
from towline.testing import towline_worker

ENGINE = ("workflows/", "activities/", "towline/runtime/")
"""The folders of the engine proper (subfolders included)."""
TURN = "run_turn"
"""The workflow-side function one turn is (in `workflows/`): the window opens when it is
entered and closes when it returns."""


def answer(messages: list[Message], info: ModelInfo) -> str:
    """The model: a text answer, so the run is one turn."""
    return "done"


AGENT = Agent(name="turn-files", model=FunctionModel(answer, model_name="turn-files"))


def roots() -> list[tuple[str, str]]:
    """(real folder, the name files in it are shown under): the towline package's own folder
    and each folder symlinked into it (`workflows`, `activities`, `capabilities`)."""
    package = Path(towline.__file__).parent
    linked = [(os.path.realpath(p), p.name) for p in package.iterdir() if p.is_symlink() and p.is_dir()]
    return [*linked, (os.path.realpath(package), "towline")]


def shown(filename: str, roots: list[tuple[str, str]]) -> str | None:
    """A file's name under its towline folder (`workflows/turn.py`), None outside towline."""
    real = os.path.realpath(filename)
    for folder, name in roots:
        if real.startswith(folder + os.sep):
            return f"{name}/{os.path.relpath(real, folder)}"
    return None


class Recorder:
    """The profile hook: records the code of every Python function called in the window.

    Armed, it opens the window when a `run_turn` of `workflows/` is entered, and closes it
    when that frame returns for good (a coroutine's frame also 'returns' each time it
    suspends: at a YIELD_VALUE, which this tells apart) or raises. The frames that called
    `run_turn` (the workflow's loop, the interceptors around it) do not count: each time
    the turn resumes after an await they resume too, a 'call' without a call.
    """

    def __init__(self, workflows: str) -> None:
        self.workflows = workflows + os.sep
        self.armed = False
        self.frame: FrameType | None = None
        self.callers: list[FrameType] = []
        self.thread = 0
        self.ended = threading.Event()
        self.codes: dict[bool, dict[int, CodeType]] = {True: {}, False: {}}
        """The functions called, by whether the workflow's thread called them."""

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call":
            if self.frame is not None:
                if not any(frame is caller for caller in self.callers):
                    self.codes[threading.get_ident() == self.thread][id(code)] = code
            elif (self.armed and code.co_name == TURN
                  and os.path.realpath(code.co_filename).startswith(self.workflows)):
                self.armed, self.frame, self.thread = False, frame, threading.get_ident()
                self.codes[True][id(code)] = code
                outer = frame.f_back
                while outer is not None:
                    self.callers.append(outer)
                    outer = outer.f_back
        elif (event == "return" and frame is self.frame
              and dis.opname[code.co_code[frame.f_lasti]] != "YIELD_VALUE"):
            self.frame, self.callers = None, []
            self.ended.set()


@dataclass
class TurnFiles:
    """The towline files one turn called functions of, with how many functions of each:
    called from the workflow's thread (the workflow code, and what it calls: the payload
    converter, the outbound interceptors), and from elsewhere (the worker: the model
    activity, its interceptors, the payload converter decoding its input)."""

    functions: dict[str, dict[str, int]] = field(default_factory=dict[str, dict[str, int]])
    """By file: {"workflow": n, "worker": m}."""

    @property
    def files(self) -> list[str]:
        return sorted(self.functions)

    @property
    def engine(self) -> list[str]:
        return [f for f in self.files if f.startswith(ENGINE)]

    @property
    def workflow(self) -> list[str]:
        """The files whose functions the workflow's thread called."""
        return [f for f in self.files if self.functions[f]["workflow"]]

    def by_folder(self) -> dict[str, list[str]]:
        folders: dict[str, list[str]] = {}
        for f in self.files:
            folder, _, name = f.rpartition("/")
            folders.setdefault(folder + "/", []).append(name)
        return folders

    def to_json(self) -> dict[str, Any]:
        return {"package": os.path.realpath(Path(towline.__file__).parent), "all": len(self.files), "engine": len(self.engine),
                "workflow_thread": len(self.workflow), "files": self.files,
                "engine_files": self.engine, "workflow_thread_files": self.workflow,
                "functions": self.functions}


async def turn_files(client: Client) -> TurnFiles:
    """Run `AGENT` twice on a worker in this process (`client`'s server) and record the
    second run's turn."""
    folders = roots()
    workflows = next(folder for folder, name in folders if name == "workflows")
    recorder = Recorder(workflows)
    before = sys.getprofile(), threading.getprofile()
    threading.setprofile(recorder)  # the workflow threads the worker starts from here on
    sys.setprofile(recorder)  # this thread: the event loop the activities run on
    try:
        async with towline_worker(client, [AGENT]) as (towline_client, queue):
            await run(towline_client, AGENT, "warm up", task_queue=queue)
            recorder.armed = True  # another prompt: nothing of the first run's is reused
            await run(towline_client, AGENT, "hello", task_queue=queue)
    finally:
        sys.setprofile(before[0])
        threading.setprofile(before[1])  # type: ignore[arg-type]
    if not recorder.ended.is_set():
        raise RuntimeError(f"the run ended without a whole turn ({TURN} entered and returned)")
    functions: dict[str, dict[str, int]] = {}
    for in_workflow, codes in recorder.codes.items():
        for code in codes.values():
            name = shown(code.co_filename, folders)
            if name is not None:
                counts = functions.setdefault(name, {"workflow": 0, "worker": 0})
                counts["workflow" if in_workflow else "worker"] += 1
    return TurnFiles(dict(sorted(functions.items())))


async def main_async() -> TurnFiles:
    server = memory_server()
    await server.start()
    try:
        return await turn_files(await Client.connect(server.address))
    finally:
        await server.stop()


def table(report: dict[str, Any]) -> str:
    measured = TurnFiles(report["functions"])
    lines = [(f"towline files one model turn passes through ({report['package']}; a text "
              "answer, no tools, no capabilities):"),
             ("functions called in each, from the workflow's thread and from the worker's "
              "(the model activity and what surrounds it)"),
             "", f"{'':<42} {'workflow':>8} {'worker':>8}"]
    for folder, names in measured.by_folder().items():
        lines.append(f"{folder} ({len(names)})")
        for name in names:
            counts = measured.functions[folder + name]
            lines.append(f"  {name:<40} {counts['workflow'] or '':>8} {counts['worker'] or '':>8}")
    lines += ["", f"all towline files: {report['all']}",
              f"engine files ({', '.join(ENGINE)}): {report['engine']}",
              f"files the workflow's thread called: {report['workflow_thread']}"]
    return "\n".join(lines)


def main() -> None:
    pin_hash_seed(["worker"])  # re-executes under the seed a `towline worker` hashes with
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    finish(asyncio.run(main_async()).to_json(), args.json, table)


if __name__ == "__main__":
    main()
