"""Workflow versions: the engine version a run takes, by one `workflow.patched` cascade.

A run started by older code replays its history with today's code whenever a
worker picks it up again (after a crash, a restart, a cache eviction). If the
code now emits other commands at some point, the replay fails with a
nondeterminism error and the run is stuck until the old code is back. So every
such change is made conditional, and committed histories under `tests/histories/`
are replayed by the suite to prove it.

How a change is versioned (the engine-version cascade):

- `engine()` resolves the run's engine version once, first thing in its first
  workflow task, by asking `workflow.patched` for the ids of `ENGINES`, NEWEST
  FIRST, and stops at the first that answers True. A new run records exactly one
  marker, the newest id (Temporal records a marker for each `patched` call that
  returns True, and nothing for one that returns False). A replayed run answers
  True only for an id whose marker its history holds, so it is recognised by the
  one id it recorded; a history with none of them is `LEGACY`.
- Every later check consults the resolved version (`at_least(N)`), never
  `patched` again: a run records one engine marker however many changes it has.
- To version a change: add `ENGINE_<N+1>` at the head of `ENGINES`, guard the new
  code with `at_least(N+1)` (the old code stays for older runs), record a history
  with it (`scripts/record_history.py --only NEW_ID`) and commit it beside the
  others. Never re-record a committed history.
- `LEGACY` runs (recorded before the cascade) keep one marker per change:
  `since(ID)` calls `workflow.patched(ID)` for them, exactly as they were written,
  and is True without a marker in every cascade version (each of those changes is
  part of `ENGINE_2`).
- The agent version is the run's other marker (`version_patch`), made in the same
  first workflow task, before the `towline.runtime.search_attributes` local activity.

Remove a branch only once no run that could reach the old path can still be
replayed (then use `workflow.deprecate_patch(ID)` for one release).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from temporalio import workflow
from temporalio.api.history.v1 import HistoryEvent

__all__ = [
    "engine",
    "at_least",
    "since",
    "LEGACY",
    "ENGINE_2",
    "ENGINE_3",
    "ENGINE_4",
    "ENGINE_5",
    "ENGINES",
    "recorded_engine",
    "history_engine",
    "EARLY_STATUS",
    "FAILURE_ACCOUNTING",
    "TRUNCATED_OUTPUT",
    "CANCELLED_SESSION",
    "TOOL_ENTRY",
    "AGENT_VERSIONS",
    "version_patch",
    "CARRIED_FACTS",
    "VERSION_FIRST",
]

# The changes made before the cascade: one `workflow.patched` id each, checked by `since`
# (each is part of ENGINE_2, so only a LEGACY run records their markers).

EARLY_STATUS = "towline-early-status"
"""The search-attribute check runs first, so a run that fails on its input or agent name
still records `TowlineStatus=failed` (and `TowlineAgent` when known)."""

FAILURE_ACCOUNTING = "towline-failure-accounting"
"""A turn that fails keeps what it spent and said: hooks' `llm_usage`, `before_model`
edits, and a model response too large to return (its request and usage)."""

TRUNCATED_OUTPUT = "towline-truncated-output"
"""A response cut off by the token limit executes nothing, its output-tool call included."""

CANCELLED_SESSION = "towline-cancelled-session"
"""A session cancelled while it waits for the next message ends as `Cancelled`."""

TOOL_ENTRY = "towline-tool-entry"
"""A non-idempotent tool whose every attempt lost its worker before the tool function
started (its heartbeats say so) is recorded `not_executed`, not `unknown`."""

AGENT_VERSIONS = "towline-agent-versions"
"""A run records its agent's version (`towline.runtime.fingerprint`) when it starts: in the ledger
memo, the `TowlineAgentVersion` search attribute and a `version_patch` marker, which a
worker replaying the run checks against its own agents."""


def version_patch(version: str) -> str:
    """The `workflow.patched` id that records (and, on replay, checks) an agent version."""
    return f"towline-agent-version-{version}"


CARRIED_FACTS = "towline-carried-facts"
"""An execution continued as new takes the run's `WorkerFacts` (registered search attributes,
payload limit) from its input instead of asking the worker again (no local activity)."""

VERSION_FIRST = "towline-version-first"
"""The run's agent version (`AGENT_VERSIONS` and `version_patch` markers) is decided before the
`towline.runtime.search_attributes` local activity, not after it. A query that reaches a run during its
first workflow task can make the SDK send the local activity's marker in that task and the
commands that follow it in the next; a replay then calls `workflow.patched` where the history
has no marker yet, and fails with a nondeterminism error (3 of 20 runs queried at once did)."""


# The engine-version cascade.

LEGACY = 1
"""The engine version of a run recorded before the cascade: one marker per change (`since`)."""

ENGINE_2 = "towline-engine-2"
"""Engine 2 (issue 21): one engine marker and one agent-version marker per run (every
per-change id before it holds), and the ledger's search attributes upserted only when they
change meaningfully: at status changes (the Int attributes with them), at most every
`ATTRIBUTE_STEPS` steps or `ATTRIBUTE_SECONDS` of workflow time between them, at the end,
and never a value the start request already set (see `Run.confirm`)."""

ENGINE_3 = "towline-engine-3"
"""Engine 3 (issues 21-23): the changes of one release, each guarded by `at_least(3)`;
each is listed where it is made (grep for `at_least(3)`)."""

ENGINE_4 = "towline-engine-4"
"""Engine 4 (issues 28-34): the changes of one release, each guarded by `at_least(4)`;
each is listed where it is made (grep for `at_least(4)`)."""

ENGINE_5 = "towline-engine-5"
"""Engine 5 (issue 40: the fifth reliability round and the porting team's traps): the changes
of one release, each guarded by `at_least(5)`; each is listed where it is made (grep for
`at_least(5)`)."""

ENGINES: tuple[tuple[str, int], ...] = (
    (ENGINE_5, 5), (ENGINE_4, 4), (ENGINE_3, 3), (ENGINE_2, 2))
"""The cascade, NEWEST FIRST: (patch id, engine version). Add a new version at the head."""

_RESOLVED = "_towline_engine"
"""The workflow instance attribute that holds the resolved engine version."""


def engine() -> int:
    """The run's engine version: resolved by the cascade on first use, then remembered.

    An update validator (or a query) that runs before the run's first step resolved it may not
    call `workflow.patched` (read-only: the workflow task would fail, again and again). Only a
    new run's first activation gets there (a replay resolves it in its first activation and
    does not validate recorded updates again), and a new run takes the newest engine: that,
    not remembered, so that the run's first step still records the marker.
    """
    instance: Any = workflow.instance()
    known: Any = getattr(instance, _RESOLVED, None)
    if isinstance(known, int):
        return known
    if workflow.unsafe.is_read_only():
        return ENGINES[0][1]
    version = LEGACY
    for patch_id, number in ENGINES:
        if workflow.patched(patch_id):
            version = number
            break
    setattr(instance, _RESOLVED, version)
    return version


def recorded_engine(patch_ids: Iterable[str]) -> int:
    """The engine version a history recorded, from the ids of its `workflow.patched` markers
    (for readers of a history outside the workflow: `LEGACY` when no cascade id is there)."""
    known = dict(ENGINES)
    return max((known[i] for i in patch_ids if i in known), default=LEGACY)


def history_engine(events: Iterable[HistoryEvent]) -> int:
    """The engine version one execution's history recorded, read from its `workflow.patched`
    markers (`core_patch`, whose `patch-data` names the id): `LEGACY` when no cascade id is there."""
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


def at_least(version: int) -> bool:
    """Whether the run's engine version is `version` or newer (no marker of its own)."""
    return engine() >= version


def since(patch_id: str) -> bool:
    """Whether this run takes the code path of a pre-cascade change `patch_id`.

    True in every cascade engine (no marker); in a `LEGACY` run, `workflow.patched(patch_id)`
    as the run was written.
    """
    if engine() > LEGACY:
        return True
    return workflow.patched(patch_id)
