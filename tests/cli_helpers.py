"""Running `towline` as a real subprocess, waiting for what a run or an eventually
consistent store shows, and reading what a run's history records."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from forkserver import forked_towline
from readme import REPO, Done, cli_env
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle

__all__ = ["towline", "towline_process", "alive", "assert_one_line_error", "until", "json_of", "cli_env",
           "TESTS_ON_PATH", "until_state", "task_failures", "patch_ids", "towline_upserts"]

TESTS_ON_PATH = os.pathsep.join([str(REPO), str(REPO / "tests")])
"""PYTHONPATH for a command that loads agents from `tests/` (`--agent frontier_agents:thinker`)."""


async def towline(*args: str, env: Mapping[str, str], cwd: Path = REPO, timeout: float = 90) -> Done:
    """Run `python -m towline.cli ARGS` and wait for it."""
    proc = await towline_process(*args, env=env, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"towline {' '.join(args)} did not finish within {timeout}s") from None
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


async def towline_process(*args: str, env: Mapping[str, str], cwd: Path = REPO) -> asyncio.subprocess.Process:
    """Start `python -m towline.cli ARGS` (stdout and stderr piped), forked from the test
    process's zygote where its environment allows (`forkserver`)."""
    forked = await forked_towline(args, env=env, cwd=cwd)
    if forked is not None:
        return forked  # type: ignore[return-value]  # the same interface
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "towline.cli", *args, cwd=cwd, env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


def alive(pid: int) -> bool:
    """Whether the process runs (an exited one not yet reaped by its parent does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def assert_one_line_error(done: Done, code: int, *fragments: str) -> None:
    """A failure the user sees as a single `towline: error:` line, never a traceback."""
    assert done.code == code, done
    assert "Traceback" not in done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("towline: error: "), done.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


async def until(
    command: Callable[[], Awaitable[Done]], ready: Callable[[Done], bool], what: str,
    timeout: float = 60,
) -> Done:
    """Repeat `command` until `ready` holds (the visibility store lags live runs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        done = await command()
        if ready(done):
            return done
        if loop.time() > deadline:
            raise AssertionError(f"never saw {what}; last answer: {done}")
        await asyncio.sleep(0.5)


def json_of(done: Done) -> Any:
    """stdout of a successful `--json` command, parsed."""
    assert done.code == 0, done
    return json.loads(done.out)


async def until_state(
    handle: WorkflowHandle[Any, Any], ready: str | Callable[[dict[str, Any]], bool],
    timeout: float = 20,
) -> dict[str, Any]:
    """Query the run's `state` until `ready` holds (a status: until the run has it); that state."""
    holds = ready if callable(ready) else lambda state: state["status"] == ready
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        state: dict[str, Any] = await handle.query("state")
        if holds(state):
            return state
        if loop.time() > deadline:
            raise AssertionError(f"run {handle.id} never reached {ready!r}; last state: {state}")
        await asyncio.sleep(0.05)


async def task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The message of each failed workflow task in the run's history (a run whose task keeps
    failing is stuck for good)."""
    return [e.workflow_task_failed_event_attributes.failure.message
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]


def patch_ids(events: Iterable[HistoryEvent]) -> list[str]:
    """The id of each `workflow.patched` marker (`core_patch`) a history records, in order."""
    return [json.loads(p.data)["id"] for e in events
            if e.marker_recorded_event_attributes.marker_name == "core_patch"
            for p in e.marker_recorded_event_attributes.details["patch-data"].payloads]


def towline_upserts(events: Iterable[HistoryEvent]) -> list[set[str]]:
    """The towline attributes of each search-attribute upsert (the SDK's own
    `TemporalChangeVersion` upserts, one per patch marker, are not billed and not ours)."""
    upserted = (set(e.upsert_workflow_search_attributes_event_attributes.search_attributes
                    .indexed_fields) - {"TemporalChangeVersion"} for e in events
                if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)
    return [names for names in upserted if names]
