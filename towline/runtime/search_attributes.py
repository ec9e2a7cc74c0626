"""The search attributes a run keeps current, and their idempotent registration.

The keys are shared by the workflow (which upserts only keys the namespace has
registered, so an unregistered attribute can never fail a workflow task) and by
workers, the embedded dev server and tests (which register them).
"""

from __future__ import annotations

from typing import Any

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

__all__ = [
    "AGENT",
    "RUN_STEP",
    "TOOL_CALLS",
    "STATUS",
    "TOTAL_TOKENS",
    "COST_MICROS",
    "AGENT_VERSION",
    "FORKED_FROM",
    "ALL_KEYS",
    "SQL_VISIBILITY_KEYS",
    "start_attributes",
    "values_of",
]

AGENT = SearchAttributeKey.for_keyword("TowlineAgent")
RUN_STEP = SearchAttributeKey.for_int("TowlineRunStep")
TOOL_CALLS = SearchAttributeKey.for_int("TowlineToolCalls")
STATUS = SearchAttributeKey.for_keyword("TowlineStatus")
TOTAL_TOKENS = SearchAttributeKey.for_int("TowlineTotalTokens")
COST_MICROS = SearchAttributeKey.for_int("TowlineCostMicros")
"""Spend in millionths of a US dollar; unset while any request's price is unknown."""
AGENT_VERSION = SearchAttributeKey.for_keyword("TowlineAgentVersion")
"""The version of the agent definition the run started with (`towline.runtime.fingerprint`)."""
FORKED_FROM = SearchAttributeKey.for_keyword("TowlineForkedFrom")
"""A fork's origin: the workflow id of the run it was forked from (`towline fork`); set in
the fork's start request only, never upserted."""

ALL_KEYS: tuple[SearchAttributeKey[str] | SearchAttributeKey[int], ...] = (
    AGENT,
    RUN_STEP,
    TOOL_CALLS,
    STATUS,
    TOTAL_TOKENS,
    COST_MICROS,
    AGENT_VERSION,
    FORKED_FROM,
)


SQL_INT_SLOTS = 3
"""Int search attributes a namespace can hold on SQL visibility (SQLite, PostgreSQL, MySQL)."""

SQL_VISIBILITY_KEYS: tuple[SearchAttributeKey[str] | SearchAttributeKey[int], ...] = tuple(
    k for i, k in enumerate(ALL_KEYS)
    if k.indexed_value_type.name != "INT"
    or sum(1 for j in ALL_KEYS[:i] if j.indexed_value_type.name == "INT") < SQL_INT_SLOTS
)
"""The keys that fit SQL visibility (the embedded dev server): its three Int slots go to
`TowlineRunStep`, `TowlineToolCalls` and `TowlineTotalTokens`, so `TowlineCostMicros`
needs Elasticsearch visibility or Temporal Cloud. Where it is not registered the workflow
does not upsert it; the cost stays in the ledger memo and `towline show`."""


def start_attributes(agent: str, version: str | None = None) -> TypedSearchAttributes:
    """What a run's start request sets (not billed, unlike the workflow's upserts): the
    agent, its version when the starter knows it, status `running` and the Int counters at 0.

    The run then upserts only what differs from these (`Ledger.confirm`).
    """
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(AGENT, agent), SearchAttributePair(STATUS, "running"),
        SearchAttributePair(RUN_STEP, 0), SearchAttributePair(TOOL_CALLS, 0),
        SearchAttributePair(TOTAL_TOKENS, 0),
    ]
    if version is not None:
        pairs.append(SearchAttributePair(AGENT_VERSION, version))
    return TypedSearchAttributes(pairs)


def values_of(attributes: TypedSearchAttributes) -> dict[str, Any]:
    """The towline attributes among `attributes` (a run's start attributes), by name."""
    ours = {key.name: key.indexed_value_type for key in ALL_KEYS}
    found: dict[str, Any] = {}
    pairs: list[SearchAttributePair[Any]] = list(attributes)
    for key, value in pairs:
        if ours.get(key.name) == key.indexed_value_type:
            found[key.name] = value
    return found
