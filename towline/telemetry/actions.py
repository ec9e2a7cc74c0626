"""What a run costs on Temporal Cloud: its billable Actions, counted from its history.

Temporal Cloud bills by Action. Its published rules ("Temporal Cloud Actions",
https://docs.temporal.io/cloud/actions) name what counts; this module applies those that
leave a trace in a workflow history, event by event:

- **workflow**: every execution started (`WORKFLOW_EXECUTION_STARTED`: a client start,
  signal-with-start, or continue-as-new, whose new execution starts with one). Pass every
  execution of a run to count its continue-as-new starts.
- **activities**: every activity attempt ("Activity started or retried"): one per
  `ACTIVITY_TASK_SCHEDULED`, or the attempt number its `ACTIVITY_TASK_STARTED` records
  (the server writes that event once, at the end, with the last attempt's number).
- **search-attribute upserts**: every `UPSERT_WORKFLOW_SEARCH_ATTRIBUTES` command, however
  many attributes it sets; one that sets only `TemporalChangeVersion` (written by
  `workflow.patched`) is exempt, and attributes given in the start request are not billed.
- **timers**: every `TIMER_STARTED`, including the implicit ones of timeouts.
- **signals**: every signal received (`WORKFLOW_EXECUTION_SIGNALED`) and every signal the
  workflow sends (`SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED`).
- **updates**: every accepted update (`WORKFLOW_EXECUTION_UPDATE_ACCEPTED`). Rejected
  updates are billed too but leave no event: they are not counted here.
- **local activities**: the local activities of one workflow task count as one Action,
  whatever their number and attempts (their markers, grouped by workflow task).
- **child workflows**: every child started (`START_CHILD_WORKFLOW_EXECUTION_INITIATED`). The
  child's own start event is in the child's history; count a child's history on its own,
  not with its parent's, or it is counted twice.

Two kinds of Action are not in a history at all, so the caller passes them when it knows
them: **queries** (every query a worker answers, the UI's stack trace included) and
**heartbeats** (every heartbeat a worker records; the SDK throttles them, so only the worker
side knows how many reached the server). Replay is never billed. Markers of `patched` and
memo upserts (`WORKFLOW_PROPERTIES_MODIFIED`) are not Actions: they cost history bytes only.

Pure: reads events, asks nothing of a server; used by `towline show` and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

__all__ = ["ActionCount", "billable_actions", "CATEGORIES", "CHANGE_VERSION"]

CHANGE_VERSION = "TemporalChangeVersion"
"""The search attribute `workflow.patched` upserts: exempt from billing."""

LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""The marker the SDK core records for each local activity."""

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("workflow", "workflow"),
    ("activities", "activities"),
    ("search_attribute_upserts", "search-attribute upserts"),
    ("timers", "timers"),
    ("signals", "signals"),
    ("updates", "updates"),
    ("queries", "queries"),
    ("local_activities", "local-activity tasks"),
    ("heartbeats", "heartbeats"),
    ("child_workflows", "child workflows"),
)
"""Each category's field and the words `ActionCount.line` uses for it, in print order."""


@dataclass(frozen=True)
class ActionCount:
    """Billable Actions by category (see the module's docstring for what each counts)."""

    workflow: int = 0
    activities: int = 0
    search_attribute_upserts: int = 0
    timers: int = 0
    signals: int = 0
    updates: int = 0
    queries: int = 0
    local_activities: int = 0
    heartbeats: int = 0
    child_workflows: int = 0

    @property
    def total(self) -> int:
        """All billable Actions."""
        return sum(asdict(self).values())

    def __add__(self, other: ActionCount) -> ActionCount:
        mine, theirs = asdict(self), asdict(other)
        return ActionCount(**{k: mine[k] + theirs[k] for k in mine})

    def line(self) -> str:
        """`14 billable (workflow 1, activities 8, search-attribute upserts 4, ...)`: the
        categories that are not zero."""
        values = asdict(self)
        parts = [f"{words} {values[name]}" for name, words in CATEGORIES if values[name]]
        return f"{self.total} billable" + (f" ({', '.join(parts)})" if parts else "")

    def to_json(self) -> dict[str, int]:
        """Every category and the total."""
        return {**asdict(self), "total": self.total}


_ONE_EACH: dict[EventType.ValueType, str] = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "workflow",
    EventType.EVENT_TYPE_TIMER_STARTED: "timers",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signals",
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED: "signals",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "updates",
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED: "child_workflows",
}
"""The events that are one Action each, and their category."""


def _upsert_billed(event: HistoryEvent) -> bool:
    fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    return any(name != CHANGE_VERSION for name in fields)


def billable_actions(
    events: Iterable[HistoryEvent], *, queries: int = 0, heartbeats: int = 0
) -> ActionCount:
    """The billable Actions of the executions whose events are given (one execution's, or
    every execution of a run, one execution after another), plus `queries` and `heartbeats` the caller
    counted on the worker side (they are not in a history)."""
    E = EventType
    counts = dict.fromkeys((name for name, _ in CATEGORIES), 0)
    counts["queries"], counts["heartbeats"] = queries, heartbeats
    attempts: dict[tuple[int, int], int] = {}  # (execution, scheduled event id): attempts
    local_tasks: set[tuple[int, int]] = set()
    execution = 0
    for event in events:
        kind = event.event_type
        if kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            execution += 1  # event ids restart in every execution: key them by execution
        if kind in _ONE_EACH:
            counts[_ONE_EACH[kind]] += 1
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attempts[execution, event.event_id] = 1
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            key = (execution, started.scheduled_event_id)
            attempts[key] = max(attempts.get(key, 1), started.attempt)
        elif kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            counts["search_attribute_upserts"] += _upsert_billed(event)
        elif kind == E.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                local_tasks.add((execution, marker.workflow_task_completed_event_id))
    counts["activities"] = sum(attempts.values())
    counts["local_activities"] = len(local_tasks)
    return ActionCount(**counts)
