"""The determinism guard's former holes, and how it lives with profilers and debuggers.

Hook code that got past the guard (an unseeded `random.Random()`, the clock through
`time.localtime()` and friends, `now()` on a datetime subclass, files through
`io.FileIO`, `linecache` or `glob`, `posix.environ`, threads, `id()`) now ends the run
`NondeterministicHook` naming the capability, the hook and the call, while the same
functions given what makes them deterministic keep working. Iterating a set of
strings, which no profiler sees, is made harmless instead: towline's commands run
under one string-hash seed, so a history recorded by `towline worker` replays under
`towline replay` whatever seed either was started with, where Temporal's `Replayer` in
a plain process does not. A profiler already installed (cProfile, a Python one, one
the guard cannot call) keeps working, and so do coverage.py and pdb.
"""

from __future__ import annotations

import _thread
import asyncio
import cProfile
import ctypes
import datetime
import glob
import io
import json
import linecache
import os
import pdb  # noqa: T100 - pdb under the guard is what is tested
import posix
import pstats
import random
import signal
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TESTS_ON_PATH, towline, towline_process
from hash_seed_agent import WORDS
from hash_seed_agent import agent as seed_agent
from readme import REPO, cli_env
from temporalio.client import Client
from test_guard import Doing, answer

from towline import Agent, Capability, ModelRequestState
from towline.client import run, start_run, with_towline
from towline.errors import NondeterministicHook, RunError
from towline.models import FunctionModel
from towline.runtime.hashseed import pin_hash_seed, wanted_seed
from towline.testing import towline_worker
from towline.workflows.guard import Guard, guarded_sync

HERE = os.path.relpath(__file__)


class Stamp(datetime.datetime):
    """A datetime subclass, as libraries (pendulum, arrow) define them."""


RAW = io.FileIO(__file__)  # opened at import, as a module might; read from a hook


# --- item 6: each hole, caught -----------------------------------------------------------------

HOLES: dict[str, tuple[Callable[[], Any], str]] = {
    "an unseeded random.Random()": (lambda: random.Random().random(),
                                    "random.Random() without a seed"),
    "a Random's seed()": (lambda: random.Random(1).seed(), "random.seed()"),
    "time.localtime()": (lambda: time.localtime(), "time.localtime() without a time"),
    "time.localtime(t)": (lambda: time.localtime(0), "time.localtime()"),  # the worker's zone
    "time.gmtime()": (lambda: time.gmtime(), "time.gmtime() without a time"),
    "time.ctime()": (lambda: time.ctime(), "time.ctime() without a time"),
    "time.asctime()": (lambda: time.asctime(), "time.asctime() without a time"),
    "time.strftime(fmt)": (lambda: time.strftime("%H:%M"), "time.strftime() without a time"),
    "time.clock_gettime": (lambda: time.clock_gettime(time.CLOCK_REALTIME),
                           "time.clock_gettime()"),
    "time.clock_gettime_ns": (lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                              "time.clock_gettime_ns()"),
    "now() on a datetime subclass": (lambda: Stamp.now(), "Stamp.now()"),
    "fromtimestamp(t) without a zone": (lambda: datetime.datetime.fromtimestamp(0),
                                        "datetime.datetime.fromtimestamp()"),
    "io.FileIO.read": (lambda: RAW.read(10), "io.FileIO.read()"),
    "linecache.getline": (lambda: linecache.getline(__file__, 1), "linecache.getline()"),
    "glob.glob": (lambda: glob.glob("*.md"), "glob.glob()"),
    "posix.environ.get": (lambda: posix.environ.get(b"PATH"), "posix.environ.get()"),
    "threading.Thread.start": (lambda: threading.Thread(target=print).start(),
                               "threading.Thread.start()"),
    "ThreadPoolExecutor.submit": (lambda: ThreadPoolExecutor(1).submit(print),
                                  "ThreadPoolExecutor.submit()"),
    "_thread.start_new_thread": (lambda: _thread.start_new_thread(print, ()),
                                 "_thread.start_new_thread()"),
    "id()": (lambda: id(object()), "id()"),
}


@pytest.mark.parametrize("hole", list(HOLES))
async def test_a_hook_through_a_former_hole_fails_the_run(client: Client, hole: str) -> None:
    action, touched = HOLES[hole]
    agent = Agent(name=f"guard-hole-{hole}", model=FunctionModel(answer, model_name="guard-hole"),
                  capabilities=[Doing(action, name="Nosy")])
    threads = threading.active_count()
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as caught:
            await run(tc, agent, "hi", task_queue=queue)
    error = caught.value
    assert error.reason == "NondeterministicHook", error
    assert error.message.startswith(f"Nosy.before_model_request called {touched} at {HERE}:"), (
        error.message)
    assert error.partial is not None and error.partial.counters.requests == 0
    assert threading.active_count() <= threads  # refused before a thread started


async def test_the_same_functions_given_what_makes_them_deterministic_keep_working(
    client: Client,
) -> None:
    def deterministic() -> dict[str, Any]:
        epoch = time.gmtime(0)
        return {
            "seeded": random.Random(7).randint(1, 100),
            "gmtime": time.strftime("%Y-%m-%d", epoch), "asctime": time.asctime(epoch),
            "utc": datetime.datetime.fromtimestamp(0, tz=datetime.UTC).year,
            "escaped": glob.escape("a*"),
            "stack": len(traceback.format_stack()) > 0,  # the library reads source: fine
        }

    kept: list[dict[str, Any]] = []
    agent = Agent(name="guard-holes-ok", model=FunctionModel(answer, model_name="guard-holes-ok"),
                  capabilities=[Doing(lambda: kept.append(deterministic()))])
    async with towline_worker(client, [agent]) as (tc, queue):
        assert (await run(tc, agent, "hi", task_queue=queue)).output == "done"
    assert kept[0] == {"seeded": random.Random(7).randint(1, 100), "gmtime": "1970-01-01",
                       "asctime": "Thu Jan  1 00:00:00 1970", "utc": 1970, "escaped": "a[*]",
                       "stack": True}


class ToThread(Capability):
    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await asyncio.to_thread(print, "from a thread")
        return state


async def test_an_async_hook_handing_work_to_a_thread_fails_the_run(client: Client) -> None:
    agent = Agent(name="guard-to-thread", model=FunctionModel(answer, model_name="guard-tt"),
                  capabilities=[ToThread()])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as caught:
            await run(tc, agent, "hi", task_queue=queue)
    assert caught.value.reason == "NondeterministicHook"
    assert caught.value.message.startswith(
        "ToThread.before_model_request called asyncio.to_thread()"), caught.value.message


# --- item 5: a set of strings, replayed under other seeds --------------------------------------


CONTROL = """
import asyncio, json, os, sys
from pathlib import Path
from hash_seed_agent import agent, first_word
from towline.replay import load_history, replay_histories

async def main():
    [outcome] = await replay_histories([load_history(Path(sys.argv[1]))], [agent])
    print(json.dumps({"first": first_word(), "ok": outcome.ok,
                      "nondeterministic": outcome.nondeterministic}), flush=True)

asyncio.run(main())
sys.stderr.flush()
os._exit(0)  # past the SDK runtime's teardown (temporalio/sdk-python#300)
"""


async def _first_word(seed: str) -> str:
    """The first of `WORDS` in a set's order, in a process started with PYTHONHASHSEED=`seed`."""
    literal = "{" + ", ".join(map(repr, WORDS)) + "}"  # first_word()'s, in a bare process
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"print(next(iter({literal})))",
        env={**os.environ, "PYTHONHASHSEED": seed}, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return out.decode().strip()


async def _control(history: Path, seed: str) -> tuple[dict[str, Any], str]:
    """Temporal's Replayer in a plain process started with PYTHONHASHSEED=`seed`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CONTROL, str(history), cwd=REPO,
        env=cli_env(extra={"PYTHONPATH": TESTS_ON_PATH, "PYTHONHASHSEED": seed}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1]), err.decode()


async def test_a_hook_iterating_a_set_of_strings_replays_under_any_seed(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    queue = f"hash-seed-{os.getpid()}"
    # the recording worker is started with another seed than towline's: it pins its own
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH, "PYTHONHASHSEED": "1"})
    worker = await towline_process("worker", "--agent", "hash_seed_agent:agent",
                                   "--task-queue", queue, env=env)
    try:
        handle = await start_run(with_towline(client, [seed_agent]), seed_agent, "hi",
                                 task_queue=queue)
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        if worker.returncode is None:
            worker.send_signal(signal.SIGINT)
        _, said = await asyncio.wait_for(worker.communicate(), 30)
    first = await _first_word("0")  # towline's seed (cli_env sets no TOWLINE_HASH_SEED)
    assert result.output == first, said.decode()  # the worker hashed with it, not with 1
    history = tmp_path / "history.json"
    history.write_text((await handle.fetch_history()).to_json())

    # `towline replay` under two other seeds: it pins towline's, the history replays
    replays = asyncio.gather(*(
        towline("replay", "--agent", "hash_seed_agent:agent", str(history),
                env={**env, "PYTHONHASHSEED": seed}) for seed in ("1", "3")))
    controls = asyncio.gather(*(_control(history, seed) for seed in ("1", "3")))
    for replayed in await replays:
        assert replayed.code == 0, replayed
        assert replayed.out.startswith(f"ok      {handle.id}"), replayed.out

    # a plain process under those seeds takes another order, and the history breaks there
    broken = 0
    for outcome, err in await controls:
        assert outcome["ok"] == (outcome["first"] == first), outcome
        broken += not outcome["ok"]
        assert outcome["ok"] or outcome["nondeterministic"], outcome
        assert "not the PYTHONHASHSEED=0 towline's commands run with" in err  # the warning
    assert broken, "neither seed changed the set's order: the replays above prove nothing"


def test_towline_hash_seed_must_be_a_number(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOWLINE_HASH_SEED", "secret")
    with pytest.raises(SystemExit) as leaving:
        pin_hash_seed(["worker", "--agent", "x:y"])
    assert leaving.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "towline: error: TOWLINE_HASH_SEED='secret' is not a number from 0 to 4294967295")
    pin_hash_seed(["show", "run-1"])  # a command that runs no workflow code: left alone
    monkeypatch.setenv("TOWLINE_HASH_SEED", "0042")
    assert wanted_seed() == "42"


# --- item 7: profilers, coverage.py and pdb ----------------------------------------------------


def _sums() -> int:
    return sum(range(3))


def _clock() -> float:
    return time.time()


def test_cprofile_is_restored_exactly_and_the_guard_still_watches() -> None:
    profile = cProfile.Profile(builtins=False)
    profile.enable()
    try:
        assert guarded_sync(Guard("Cap.hook"), _sums) == 3
        kept = sys.getprofile()
        with pytest.raises(NondeterministicHook):
            guarded_sync(Guard("Cap.hook"), _clock)
        still = sys.getprofile()
        _sums()
    finally:
        profile.disable()
    assert kept is profile and still is profile
    report = io.StringIO()
    stats = pstats.Stats(profile, stream=report)
    stats.print_stats()
    assert "(_sums)" in report.getvalue()  # it went on profiling after the guarded calls
    assert "{built-in method builtins.sum}" not in report.getvalue()  # as configured


def test_a_python_profiler_sees_the_hook_and_is_put_back() -> None:
    events: list[tuple[str, str]] = []

    def mine(frame: Any, event: str, arg: Any) -> None:
        events.append((event, frame.f_code.co_name))

    sys.setprofile(mine)
    try:
        assert guarded_sync(Guard("Cap.hook"), _sums) == 3
        with pytest.raises(NondeterministicHook):
            guarded_sync(Guard("Cap.hook"), _clock)
        kept = sys.getprofile()
    finally:
        sys.setprofile(None)
    assert kept is mine
    assert ("call", "_sums") in events and ("return", "_sums") in events
    assert ("call", "_clock") in events


def test_the_guard_steps_aside_for_a_profiler_it_cannot_call() -> None:
    """A C profiler whose object is not callable: the guard can neither chain nor put it
    back, so the hook runs unwatched and the profiler keeps seeing it."""
    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int,
                                ctypes.c_void_p)
    seen: list[int] = []
    on_event = callback(lambda obj, frame, what, arg: seen.append(what) or 0)
    owner = object()
    set_profile = ctypes.pythonapi.PyEval_SetProfile
    set_profile.argtypes, set_profile.restype = [callback, ctypes.py_object], None
    set_profile(on_event, owner)
    try:
        result = guarded_sync(Guard("Cap.hook"), _clock)
        kept = sys.getprofile()
    finally:
        sys.setprofile(None)
    assert isinstance(result, float) and kept is owner and seen


def test_pdb_stops_at_a_breakpoint_in_a_guarded_hook() -> None:
    def hook() -> int:
        answer = 6 * 7
        return answer  # the breakpoint

    line = hook.__code__.co_firstlineno + 2
    out = io.StringIO()
    commands = io.StringIO(f"break {__file__}:{line}\ncontinue\np answer\ncontinue\n")
    debugger = pdb.Pdb(stdin=commands, stdout=out, nosigint=True, readrc=False)
    debugger.use_rawinput = False
    previous = sys.gettrace()
    try:
        assert debugger.runcall(guarded_sync, Guard("Cap.hook"), hook) == 42
    finally:
        sys.settrace(previous)
    said = out.getvalue()
    assert f"{__file__}({line})hook()" in said and "\n(Pdb) 42\n" in said, said


COVERED = """
import json, sys
import coverage

cov = coverage.Coverage(data_file=None, include=[sys.argv[1]])
cov.start()
sys.path.insert(0, sys.argv[2])
import guarded_hooks
from towline.errors import NondeterministicHook
from towline.workflows.guard import Guard, guarded_sync

result = guarded_sync(Guard("Cap.hook"), guarded_hooks.hook)
try:
    guarded_sync(Guard("Cap.clock"), guarded_hooks.clock)
    refused = False
except NondeterministicHook:
    refused = True
cov.stop()
lines = sorted(cov.get_data().lines(sys.argv[1]) or [])
print(json.dumps({"result": result, "refused": refused, "lines": lines}))
"""


async def test_coverage_records_the_lines_of_a_guarded_hook(tmp_path: Path) -> None:
    hooks = tmp_path / "guarded_hooks.py"
    hooks.write_text(textwrap.dedent("""\
        import time


        def hook():
            total = 0
            for i in range(3):
                total += i
            return total


        def clock():
            return time.time()
        """))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", COVERED, str(hooks), str(tmp_path), cwd=REPO, env=cli_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    found = json.loads(out)
    assert found["result"] == 3 and found["refused"]
    assert {5, 6, 7, 8, 12} <= set(found["lines"]), found  # both bodies, under the guard
