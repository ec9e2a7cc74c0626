"""`Ledger`: what a run records of itself, and when (the workflow side of the ledger).

A part of `Run` (`Run.ledger`). It holds the confirmed counters, the run's usage and status,
and what it last wrote where a client reads without a worker: the memo `towline.counters`
(with the state snapshot, the audit trail and the waiting reason), the search attributes and
the current details. Every confirmed transition calls `confirm()`, which writes them when they
are due; the confirmed counters themselves ride on the header of every activity the run
schedules (`header()`). Their encoding, the `RunCounters` record, is
`towline.runtime.ledger`'s.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

from towline.agent import Agent
from towline.errors import UsageLimitExceeded, runtime_failure
from towline.messages import Usage
from towline.options import COST_MAX, INT64_MAX, Limits
from towline.results import Counters, HandoffRecord, RunStatus
from towline.runtime import search_attributes as sa
from towline.runtime.ledger import MEMO_KEY, RunCounters, from_proto, to_proto
from towline.timetravel.lineage import FORKED_FROM_MEMO, STATE_MEMO, state_snapshot

from .details import current_details
from .waiting import DECISIONS_MEMO, Approvals, trail_memo

__all__ = ["Ledger", "Recorded", "ATTRIBUTE_STEPS", "ATTRIBUTE_SECONDS", "start_counters"]

ATTRIBUTE_STEPS = 10
"""Between status changes, the Int search attributes and the memo `towline.counters` are
written at most once per this many steps: one billable Action and
two history events per 10 steps keep the counters a list shows and filters on within 10
steps of the ledger; the end of the run and every status change write them exactly."""

ATTRIBUTE_SECONDS = 300
"""...or once per this many seconds of workflow time, whichever comes first: a slow run (a
long model call, a long tool) is then at most 5 minutes stale in a list, at one Action per
5 minutes at most."""


def start_counters() -> Counters | None:
    """The counters the start request's memo `towline.counters` holds (`start_run`
    sets them), so the run's first confirm writes the memo only where they differ; None when
    the start set none (or none readable)."""
    try:
        record: Any = workflow.memo_value(MEMO_KEY, None, type_hint=RunCounters)
    except Exception:  # noqa: BLE001 - unreadable: the first confirm writes the memo
        return None
    return from_proto(record) if isinstance(record, RunCounters) else None


class Recorded(Protocol):
    """What the ledger records of its run besides its own fields (`Run` is one)."""

    @property
    def agent(self) -> Agent: ...
    @property
    def started_as(self) -> str: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def state(self) -> dict[str, Any]: ...
    @property
    def handoffs(self) -> list[HandoffRecord]: ...
    @property
    def approvals(self) -> Approvals: ...


@dataclass
class Ledger:
    """The run's confirmed counters, usage and status, and what it last recorded of them."""

    counters: Counters
    """The confirmed counters (the `towline.counters` header and memo, the result's)."""
    usage: Usage = field(default_factory=Usage)
    """The run's usage so far (its tokens and cost are in `counters` too)."""
    status: RunStatus = RunStatus.RUNNING
    """The status last confirmed (search attribute `TowlineStatus`)."""
    reported_usage: Usage = field(default_factory=Usage)
    """Usage hooks reported (`HookApi.report_usage`), not yet merged (`merge_reported_usage`)."""
    guard_requests: int = 0
    """The guard model requests made so far (`requests_paid`), carried on
    continue-as-new (`ResumeState.guard_requests`)."""
    registered_attributes: frozenset[str] = frozenset()
    """The search attributes the namespace has registered (only those are upserted)."""
    recorded_counters: Counters | None = None
    """The counters last written to the memo (set from the start memo on continue-as-new)."""
    recorded_attributes: dict[str, Any] = field(default_factory=dict[str, Any])
    """The search attribute values last upserted (first, the start request's)."""
    recorded_state: dict[str, Any] = field(default_factory=dict[str, Any])
    """The contributed state last recorded in memo `towline.state` (or carried into this
    execution): `confirm` records it when it changes (`towline.timetravel.lineage`: what a fork
    starts from)."""
    lineage: Any = None
    """A fork's `towline.forked_from` memo value (carried across continue-as-new)."""
    lineage_details: str = ""
    """A fork's line in the current details, linking the run it was forked from."""
    run: Recorded = field(init=False, repr=False, compare=False)
    """The run it records (`Run` sets itself here)."""
    _attributes_mark: tuple[int, float] | None = field(default=None, repr=False)
    """The step and workflow time (seconds) of the last Int attributes' upsert;
    None until the execution's first confirm."""
    _header: tuple[Counters, Payload] | None = field(default=None, repr=False)
    """The counters of the last header and its payload."""

    def bump(self, **changes: Any) -> None:
        """Replace counters (confirmed values only)."""
        self.counters = self.counters.model_copy(update=changes)

    def add_usage(self, usage: Usage) -> None:
        """Fold usage into the run's totals and the ledger's tokens and cost."""
        changes: dict[str, Any] = {
            "input_tokens": self.counters.input_tokens + usage.input_tokens,
            "output_tokens": self.counters.output_tokens + usage.output_tokens,
        }
        total = self.usage + usage
        if usage.cost or usage.unpriced_requests:
            # the ledger's cost is the run's summed dollars, rounded once (not per response)
            changes["cost_micros"] = round(min(total.cost, COST_MAX) * 1_000_000)
            changes["unpriced_requests"] = total.unpriced_requests
        # Past its 64-bit fields the ledger cannot record the run: end it, typed, with its
        # partial run and the counters as last confirmed (each response is bounded by the
        # model activity; a hook's `llm_usage` or a very long run could still add up).
        for name, value in changes.items():
            if value > INT64_MAX:
                raise runtime_failure(UsageLimitExceeded(
                    f"the run's {name} ({value}) would pass what the ledger records "
                    f"({INT64_MAX})"))
        self.usage = total
        self.bump(**changes)

    def requests_paid(self) -> int:
        """The model requests `request_limit` bounds: the run's own (`counters.requests`) and
        its guard models' (`guard_requests`). The ledger's `requests` stays the run's own, so
        that request n's header says n - 1."""
        return self.counters.requests + self.guard_requests

    def check_spend(self) -> None:
        """Fail the run if its tokens or its known cost exceed the run's limits."""
        total = self.run.limits.total_tokens_limit
        if total is not None and self.counters.total_tokens > total:
            raise runtime_failure(UsageLimitExceeded(
                f"total_tokens_limit {total} exceeded ({self.counters.total_tokens} tokens)"
            ))
        cost = self.run.limits.cost_limit
        spent = self.counters.cost_micros or 0
        if cost is not None and spent > round(cost * 1_000_000):
            raise runtime_failure(UsageLimitExceeded(
                f"cost_limit ${cost:g} exceeded (${spent / 1_000_000:.6f} spent)"))

    def merge_reported_usage(self) -> None:
        """Fold usage reported by hooks into the totals (at a commit, or when the run fails)."""
        if self.reported_usage != Usage():
            self.add_usage(self.reported_usage)
            self.reported_usage = Usage()

    def confirm(self, status: RunStatus | None = None) -> None:
        """A confirmed transition: upsert what changed of the visible counters (memo and search
        attributes) when they are due, and show the counters in the current details.

        The confirmed counters ride on the next activity's header, so the memo
        `towline.counters` and the search attributes are written together, when due
        (`_attributes_due`: an execution's first confirm, every status change, at most every
        `ATTRIBUTE_STEPS` steps or `ATTRIBUTE_SECONDS` between), or with a state snapshot.
        """
        changed_status = status is not None and status != self.status
        if status is not None:
            self.status = status
        due = self._attributes_due(changed_status)
        memo: dict[str, Any] = {}
        state_changed = self.run.state != self.recorded_state
        # the counters join a state snapshot's command (it costs no event of its own)
        if (due or state_changed) and self.counters != self.recorded_counters:
            memo[MEMO_KEY] = to_proto(self.counters)
            self.recorded_counters = self.counters
        if state_changed:  # one command with the counters
            memo[STATE_MEMO] = state_snapshot(self.run.state, workflow.payload_converter())
            self.recorded_state = copy.deepcopy(self.run.state)
        if due:  # the trail and the waiting reason follow the ledger memo's cadence
            waiting = self.run.approvals.waiting_for if self.status == RunStatus.WAITING else None
            trail, self.run.approvals.hitl.recorded = trail_memo(self.run.approvals.hitl, waiting)
            memo.update(trail)
        if memo:
            workflow.upsert_memo(memo)
        if due:
            self._upsert_attributes()
        workflow.set_current_details(self.details())

    def header(self) -> Payload:
        """The `towline.counters` header of an activity scheduled now (the confirmed
        counters, `json/protobuf`), converted once per value of the counters. The current
        details (free: no event) show them from here on, so they are never behind a header."""
        cached = self._header
        if cached is None or cached[0] != self.counters:
            record = to_proto(self.counters)
            payload = workflow.payload_converter().to_payloads([record])[0]
            cached = self._header = (self.counters, payload)
            workflow.set_current_details(self.details())
        return cached[1]

    def _attributes_due(self, changed_status: bool) -> bool:
        """Whether this confirm upserts the search attributes that changed."""
        now = workflow.now().timestamp()
        mark = self._attributes_mark
        due = (changed_status or mark is None
               or self.counters.run_step - mark[0] >= ATTRIBUTE_STEPS
               or now - mark[1] >= ATTRIBUTE_SECONDS)
        if due:
            self._attributes_mark = (self.counters.run_step, now)
        return due

    def _upsert_attributes(self) -> None:
        values: list[tuple[SearchAttributeKey[Any], Any]] = [
            (sa.AGENT, self.run.started_as),
            (sa.RUN_STEP, self.counters.run_step),
            (sa.TOOL_CALLS, self.counters.tool_calls),
            (sa.STATUS, self.status),
            (sa.TOTAL_TOKENS, self.counters.total_tokens),
            (sa.COST_MICROS, self.counters.known_cost_micros),  # None: unknown, so unset
            (sa.AGENT_VERSION, self.counters.agent_version),  # None: a run from before versions
        ]
        updates: list[SearchAttributeUpdate[Any]] = [
            key.value_set(value) if value is not None else key.value_unset()
            for key, value in values
            if key.name in self.registered_attributes and self.recorded_attributes.get(key.name) != value
            and (value is not None or key.name in self.recorded_attributes)
        ]
        if updates:
            workflow.upsert_search_attributes(updates)  # pyright: ignore[reportUnknownMemberType]
            self.recorded_attributes.update(
                {key.name: value for key, value in values if key.name in self.registered_attributes}
            )

    def details(self) -> str:
        """Markdown shown as the workflow's current details in the UI (`details.current_details`)."""
        return current_details(self.run.agent.name, self.status, self.counters, self.run.handoffs,
                               self.run.approvals.pending, self.run.approvals.waiting_for, self.lineage_details,
                               self.usage.native_tool_uses)

    def carried_memo(self) -> dict[str, Any]:
        """The memo continue-as-new carries: the counters, a fork's lineage, the state snapshot
        and the audit trail."""
        memo: dict[str, Any] = {MEMO_KEY: to_proto(self.counters)}
        if self.lineage is not None:
            memo[FORKED_FROM_MEMO] = self.lineage
        if self.run.state:
            memo[STATE_MEMO] = state_snapshot(self.run.state, workflow.payload_converter())
        if self.run.approvals.hitl.total:
            memo[DECISIONS_MEMO] = {"total": self.run.approvals.hitl.total, "entries": self.run.approvals.hitl.audit}
        return memo
