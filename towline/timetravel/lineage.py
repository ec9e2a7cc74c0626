"""What time travel records in a run: its lineage and its contributed state (pure code).

A fork (`towline fork`, `towline.timetravel.travel.fork`) is a new run started from another
run's conversation before one of its steps. Its start request sets memo
`towline.forked_from` = `{"run_id": ..., "step": ...}` (`ForkedFrom`), which the run
shows as a link in its current details (`lineage_line`) and carries across
continue-as-new, and the `TowlineForkedFrom` search attribute where the namespace has
it registered.

A fork starts from the contributed state its origin had before that step. The ledger
memo holds counters only, so a run also records its state: memo
`towline.state` is upserted, in the same command as the counters, whenever the
committed state changes (`state_snapshot`), so the history holds the state at every
confirmed transition. A state too large for a memo (`STATE_MEMO_LIMIT`) is recorded as
`null`: unknown, never a wrong value.

Pure: imported by workflow code and by clients.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadConverter

__all__ = [
    "FORKED_FROM_MEMO",
    "STATE_MEMO",
    "STATE_MEMO_LIMIT",
    "ForkedFrom",
    "forked_from",
    "lineage_in",
    "state_snapshot",
    "lineage_line",
    "run_lineage",
]

FORKED_FROM_MEMO = "towline.forked_from"
"""Memo key of a fork's lineage (`ForkedFrom` as JSON), set in its start request."""
STATE_MEMO = "towline.state"
"""Memo key of the run's committed contributed state, upserted when it changes."""
STATE_MEMO_LIMIT = 16 * 1024
"""The largest state (JSON payload bytes) recorded in the memo; a larger one is recorded
as `null` (Temporal keeps memos small: every listing returns them)."""


class ForkedFrom(BaseModel):
    """A fork's origin: the run it was forked from, and the step it re-asks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(min_length=1)
    """The workflow id of the run it was forked from."""
    step: int = Field(ge=1)
    """The step of that run before whose model request it was forked."""


def forked_from(value: Any) -> ForkedFrom | None:
    """The lineage a memo value records (None: absent or not a lineage record)."""
    if value is None:
        return None
    try:
        return ForkedFrom.model_validate(value)
    except ValidationError:
        return None


def lineage_in(memo: Mapping[str, Payload]) -> ForkedFrom | None:
    """The lineage a run's raw memo records (a listing's or a description's), if any."""
    payload = memo.get(FORKED_FROM_MEMO)
    if payload is None or payload.metadata.get("encoding") != b"json/plain":
        return None  # absent, or encrypted: `towline show --encrypt` reads the counters only
    try:
        return forked_from(json.loads(payload.data))
    except ValueError:
        return None


def state_snapshot(state: dict[str, Any], converter: PayloadConverter) -> dict[str, Any] | None:
    """What memo `towline.state` records for `state`: the state itself, or None when it does
    not encode or exceeds `STATE_MEMO_LIMIT` (a memo that fails to encode would fail the
    workflow task)."""
    try:
        [payload] = converter.to_payloads([state])
    except Exception:  # noqa: BLE001 - any encoding failure: recorded as unknown
        return None
    return state if payload.ByteSize() <= STATE_MEMO_LIMIT else None


def lineage_line(origin: ForkedFrom, namespace: str) -> str:
    """Markdown for the run's current details: a link to the run it was forked from.

    The link is relative to the Temporal UI that shows the details (same namespace).
    """
    url = f"/namespaces/{quote(namespace, safe='')}/workflows/{quote(origin.run_id, safe='')}"
    return f"- forked from [{origin.run_id}]({url}) at step {origin.step}"


def run_lineage() -> tuple[Any, str]:
    """Inside a run: its `towline.forked_from` memo value (None if it is no fork) and the
    line its current details show for it. A memo that does not read is no lineage: reading
    it never fails the workflow task."""
    try:
        raw: Any = workflow.memo_value(FORKED_FROM_MEMO, default=None)
    except Exception:  # noqa: BLE001 - an unreadable memo (another converter): no lineage
        return None, ""
    origin = forked_from(raw)
    if origin is None:
        return None, ""
    return origin.model_dump(mode="json"), lineage_line(origin, workflow.info().namespace)
