"""The worker's facts a run decides by: registered search attributes, payload limit, model routes.

A run asks the worker that starts it once, by the `towline.runtime.search_attributes` local
activity, whose marker records the answer: a worker replaying the run later decides exactly
as the first one did, whatever its own configuration. Continue-as-new carries the facts in
the next execution's input, so later executions ask no worker again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow

from towline.activities.io import SEARCH_ATTRIBUTES_ACTIVITY
from towline.results import WorkerFacts

__all__ = ["worker_facts"]


def _facts_of(raw: Any) -> WorkerFacts:
    """The local activity's answer, `WorkerFacts`."""
    try:
        return WorkerFacts.model_validate(raw)
    except ValidationError:
        return WorkerFacts()


def _carried_facts(args: Sequence[Any]) -> WorkerFacts | None:
    """The facts an execution continued by this code carries in its input, if any."""
    if workflow.info().continued_run_id is None or len(args) != 1:
        return None
    first: Any = args[0]
    resume: Any = first.get("resume") if isinstance(first, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    facts: Any = resume.get("facts") if isinstance(resume, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if facts is None:
        return None
    try:
        return WorkerFacts.model_validate(facts)
    except ValidationError:
        return None


async def worker_facts(args: Sequence[Any]) -> WorkerFacts:
    """The run's facts: carried from the previous execution, else asked of this worker
    (recorded by the local activity's marker)."""
    carried = _carried_facts(args)
    if carried is not None:
        return carried
    try:
        raw: Any = await workflow.execute_local_activity(
            SEARCH_ATTRIBUTES_ACTIVITY, start_to_close_timeout=timedelta(seconds=30),
        )
    except Exception:  # noqa: BLE001 - no registry access: the run goes on without search attributes
        return WorkerFacts()
    return _facts_of(raw)
