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
    "ALL_KEYS",
]

AGENT = SearchAttributeKey.for_keyword("TowlineAgent")
RUN_STEP = SearchAttributeKey.for_int("TowlineRunStep")
TOOL_CALLS = SearchAttributeKey.for_int("TowlineToolCalls")
STATUS = SearchAttributeKey.for_keyword("TowlineStatus")
TOTAL_TOKENS = SearchAttributeKey.for_int("TowlineTotalTokens")

ALL_KEYS: tuple[SearchAttributeKey[str] | SearchAttributeKey[int], ...] = (
    AGENT,
    RUN_STEP,
    TOOL_CALLS,
    STATUS,
    TOTAL_TOKENS,
)
