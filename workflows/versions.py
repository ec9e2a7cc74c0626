"""Workflow versions: one `workflow.patched` id per change to the commands `AgentRun` emits.

A run started by older code replays its history with today's code whenever a
worker picks it up again (after a crash, a restart, a cache eviction). If the
code now emits other commands at some point, the replay fails with a
nondeterminism error and the run is stuck until the old code is back. So every
such change is made conditional: `since(ID)` is True in runs that reach it with
this code (and records that in their history), False when replaying a history
written before the change. Committed histories under `tests/histories/` are
replayed by the suite to prove it.

Remove a branch only once no run that could reach the old path can still be
replayed (then use `workflow.deprecate_patch(ID)` for one release).
"""

from __future__ import annotations

from temporalio import workflow

__all__ = [
    "since",
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


def since(patch_id: str) -> bool:
    """Whether this run takes the code path introduced by `patch_id` (see the module doc)."""
    return workflow.patched(patch_id)

TOOL_ENTRY = "towline-tool-entry"
"""A non-idempotent tool whose every attempt lost its worker before the tool function
started (its heartbeats say so) is recorded `not_executed`, not `unknown`."""

AGENT_VERSIONS = "towline-agent-versions"
"""A run records its agent's version (`towline.fingerprint`) when it starts: in the ledger
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
`towline.search_attributes` local activity, not after it. A query that reaches a run during its
first workflow task can make the SDK send the local activity's marker in that task and the
commands that follow it in the next; a replay then calls `workflow.patched` where the history
has no marker yet, and fails with a nondeterminism error (3 of 20 runs queried at once did)."""
