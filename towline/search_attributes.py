"""The search attributes a run keeps current, and their idempotent registration.

The keys are shared by the workflow (which upserts only keys the namespace has
registered, so an unregistered attribute can never fail a workflow task) and by
workers, the embedded dev server and tests (which register them).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

__all__ = [
    "AGENT",
    "RUN_STEP",
    "TOOL_CALLS",
    "STATUS",
    "TOTAL_TOKENS",
    "COST_MICROS",
    "AGENT_VERSION",
    "ALL_KEYS",
    "SQL_VISIBILITY_KEYS",
]

AGENT = SearchAttributeKey.for_keyword("TowlineAgent")
RUN_STEP = SearchAttributeKey.for_int("TowlineRunStep")
TOOL_CALLS = SearchAttributeKey.for_int("TowlineToolCalls")
STATUS = SearchAttributeKey.for_keyword("TowlineStatus")
TOTAL_TOKENS = SearchAttributeKey.for_int("TowlineTotalTokens")
COST_MICROS = SearchAttributeKey.for_int("TowlineCostMicros")
"""Spend in millionths of a US dollar; unset while any request's price is unknown."""
AGENT_VERSION = SearchAttributeKey.for_keyword("TowlineAgentVersion")
"""The version of the agent definition the run started with (`towline.fingerprint`)."""

ALL_KEYS: tuple[SearchAttributeKey[str] | SearchAttributeKey[int], ...] = (
    AGENT,
    RUN_STEP,
    TOOL_CALLS,
    STATUS,
    TOTAL_TOKENS,
    COST_MICROS,
    AGENT_VERSION,
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
