"""Workflow versions: the engine version a run takes, by one `workflow.patched` cascade.

A run started by older code replays its history with today's code whenever a
worker picks it up again (after a crash, a restart, a cache eviction). If the
code now emits other commands at some point, the replay fails with a
nondeterminism error and the run is stuck until the old code is back. So every
such change is made conditional, and committed histories under `tests/histories/`
are replayed by the suite to prove it.

Towline 1.0 is one engine, `BASE` (1): a 1.0 run records no engine marker, and the 1.0
histories under `tests/histories/` are its baseline, never re-recorded. `ENGINES` is empty
until the first change after 1.0. The ids of later versions name the release that brings
them (`towline-1.1`, ...), never `towline-engine-N`: those were 0.x markers, and a 0.x
history must not read as a 1.x one.

How a change is versioned (the engine-version cascade):

- `engine()` resolves the run's engine version once, first thing in its first
  workflow task, by asking `workflow.patched` for the ids of `ENGINES`, NEWEST
  FIRST, and stops at the first that answers True. A new run records exactly one
  marker, the newest id (Temporal records a marker for each `patched` call that
  returns True, and nothing for one that returns False). A replayed run answers
  True only for an id whose marker its history holds, so it is recognised by the
  one id it recorded; a history with none of them is a `BASE` (1.0) run.
- Every later check consults the resolved version (`at_least(N)`), never
  `patched` again: a run records one engine marker however many changes it has.
- To version a change: add its id at the head of `ENGINES` (the first after 1.0:
  `ENGINES = ("towline-1.1",)`, engine 2), guard the new code with
  `at_least(2)` (the old code stays for older runs), record a history with it
  (`scripts/record_history.py --only NEW_ID`) and commit it beside the 1.0 ones.
  Never re-record a committed history.
- The agent version is the run's other marker (`agent_versions.recorded_version`,
  `version_patch`), made in the same first workflow task, before the
  `towline.search_attributes` local activity.

Remove a branch only once no run that could reach the old path can still be
replayed (then use `workflow.deprecate_patch(ID)` for one release).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from temporalio import workflow
from temporalio.api.history.v1 import HistoryEvent

from . import scope

__all__ = [
    "BASE",
    "ENGINES",
    "engine",
    "at_least",
    "recorded_engine",
    "history_engine",
    "version_patch",
]

BASE = 1
"""The engine version of towline 1.0, which records no engine marker."""

ENGINES: tuple[str, ...] = ()
"""The cascade's patch ids, NEWEST FIRST: the id at index i is engine `BASE + len(ENGINES) - i`.
Add a new version at the head."""

_RESOLVED = "_towline_engine"
"""The `AgentRun` attribute that holds the resolved engine version."""


def version_patch(version: str) -> str:
    """The `workflow.patched` id that records (and, on replay, checks) an agent version."""
    return f"towline-agent-version-{version}"


def _number(index: int) -> int:
    """The engine version of `ENGINES[index]`."""
    return BASE + len(ENGINES) - index


def engine(run: object | None = None) -> int:
    """The run's engine version: resolved by the cascade on first use, then remembered on `run`
    (the `AgentRun`: a handler passes its `self`; by default the running one, `workflows.scope`).

    An update validator (or a query) that runs before the run's first step resolved it may not
    call `workflow.patched` (read-only: the workflow task would fail, again and again). Only a
    new run's first activation gets there (a replay resolves it in its first activation and
    does not validate recorded updates again), and a new run takes the newest engine: that,
    not remembered, so that the run's first step still records the marker.
    """
    instance: Any = run if run is not None else scope.current()
    known: Any = getattr(instance, _RESOLVED, None)
    if isinstance(known, int):
        return known
    if workflow.unsafe.is_read_only():
        return _number(0) if ENGINES else BASE
    version = BASE
    for index, patch_id in enumerate(ENGINES):
        if workflow.patched(patch_id):
            version = _number(index)
            break
    if instance is not None:
        setattr(instance, _RESOLVED, version)
    return version


def at_least(version: int, run: object | None = None) -> bool:
    """Whether the run's engine version is `version` or newer (no marker of its own); `run` as
    `engine` takes it."""
    return engine(run) >= version


def recorded_engine(patch_ids: Iterable[str]) -> int:
    """The engine version a history recorded, from the ids of its `workflow.patched` markers
    (for readers of a history outside the workflow: `BASE` when no cascade id is there)."""
    known = {patch_id: _number(i) for i, patch_id in enumerate(ENGINES)}
    return max((known[i] for i in patch_ids if i in known), default=BASE)


def history_engine(events: Iterable[HistoryEvent]) -> int:
    """The engine version one execution's history recorded, read from its `workflow.patched`
    markers (`core_patch`, whose `patch-data` names the id): `BASE` when no cascade id is there."""
    ids: list[str] = []
    for e in events:
        attrs = e.marker_recorded_event_attributes
        if attrs.marker_name != "core_patch" or "patch-data" not in attrs.details:
            continue
        for p in attrs.details["patch-data"].payloads:
            try:
                ids.append(str(json.loads(p.data).get("id")))
            except (ValueError, AttributeError):
                continue
    return recorded_engine(ids)
