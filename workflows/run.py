"""`Run`: the mutable, workflow-owned record of one run, and the ledger it keeps.

Only the runtime writes here. Hooks see copies; what they return is checked
before anything here changes. Every confirmed transition calls `confirm()`, which
writes the visible counters (the memo `towline.counters` and the search attributes)
when they are due; engine 4 on, the confirmed counters themselves ride on the header
of every activity the run schedules (`header()`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

from towline.agent import Agent
from towline.errors import PayloadTooLarge, UsageLimitExceeded, runtime_failure
from towline.mcp import MCPToolSpec
from towline.messages import Message, ModelRequest, ModelResponse, ToolReturnPart, Usage
from towline.options import COST_MAX, INT64_MAX, Limits, ModelSettings
from towline.results import Counters, HandoffRecord, PartialRun, RunStatus
from towline.runtime import search_attributes as sa
from towline.runtime.ledger import MEMO_KEY, RunCounters, from_proto, to_proto
from towline.runtime.payloads import PAYLOAD_LIMIT, payload_size
from towline.timetravel.lineage import FORKED_FROM_MEMO, STATE_MEMO, state_snapshot
from towline.tools import Tool

from .details import current_details
from .versions import at_least
from .waiting import DECISIONS_MEMO, WAITING_MEMO, ApprovalState, trail_memo

__all__ = ["Run", "DECISIONS_MEMO", "WAITING_MEMO", "PAYLOAD_LIMIT", "ATTRIBUTE_STEPS",
           "ATTRIBUTE_SECONDS", "oversize", "run_payload_limit", "start_counters", "check_state_fits"]

ATTRIBUTE_STEPS = 10
"""Between status changes, the Int search attributes (engine 2) and, engine 4 on, the memo
`towline.counters` are written at most once per this many steps: one billable Action and
two history events per 10 steps keep the counters a list shows and filters on within 10
steps of the ledger; the end of the run and every status change write them exactly."""

ATTRIBUTE_SECONDS = 300
"""...or once per this many seconds of workflow time, whichever comes first: a slow run (a
long model call, a long tool) is then at most 5 minutes stale in a list, at one Action per
5 minutes at most."""


def start_counters() -> Counters | None:
    """Engine 4: the counters the start request's memo `towline.counters` holds (`start_run`
    sets them), so the run's first confirm writes the memo only where they differ; None when
    the start set none (or none readable)."""
    try:
        record: Any = workflow.memo_value(MEMO_KEY, None, type_hint=RunCounters)
    except Exception:  # noqa: BLE001 - unreadable: the first confirm writes the memo
        return None
    return from_proto(record) if isinstance(record, RunCounters) else None


def run_payload_limit() -> int:
    """The running workflow's payload limit: `PAYLOAD_LIMIT`, or its store's (`WorkerFacts`)."""
    limit: Any = getattr(workflow.instance(), "payload_limit", PAYLOAD_LIMIT)
    return limit if isinstance(limit, int) else PAYLOAD_LIMIT


def oversize(value: Any, limit: int | None = None) -> int:
    """Bytes `value` would take as a payload of this workflow if over `limit` (default: the
    run's), else 0."""
    size = payload_size(workflow.payload_converter(), value)
    return 0 if size <= (run_payload_limit() if limit is None else limit) else size


def check_state_fits(state: Mapping[str, Any], writers: Mapping[str, str]) -> None:
    """Fail the run `PayloadTooLarge` if a written key (`writers`: key -> the hook or tool that
    wrote it) makes `state` too large for a payload (engine 4): the state goes into every
    tool's context, the run's result and its failure, so it would fail a workflow task forever."""
    if not oversize(dict(state)):
        return
    sizes = {key: oversize({key: state.get(key)}, 0) for key in writers}
    key = max(sizes, key=lambda k: sizes[k])
    raise PayloadTooLarge(
        f"{writers[key]} wrote state key {key!r} ({sizes[key]} bytes): the run's state is over "
        f"the {run_payload_limit()}-byte payload limit. Keep large values out of run state (in "
        "a file or a store, with their reference in state)")


def _is_returns(message: Message) -> bool:
    """A request made only of tool return records."""
    return isinstance(message, ModelRequest) and bool(message.parts) and all(
        isinstance(p, ToolReturnPart) for p in message.parts
    )


@dataclass
class Run:
    """The state of a run that only the runtime changes."""

    agent: Agent
    run_id: str
    limits: Limits
    messages: list[Message]
    state: dict[str, Any]
    counters: Counters
    usage: Usage = field(default_factory=Usage)
    status: RunStatus = RunStatus.RUNNING
    allowed_tools: frozenset[str] | None = None
    registered_attributes: frozenset[str] = frozenset()
    pending_approvals: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    recorded_counters: Counters | None = None
    """The counters last written to the memo (set from the start memo on continue-as-new)."""
    recorded_attributes: dict[str, Any] = field(default_factory=dict[str, Any])
    """The search attribute values last upserted (engine 2: first, the start request's)."""
    sparse_attributes: bool = False
    """Engine 2: upsert search attributes only when they change meaningfully (`confirm`)."""
    _attributes_mark: tuple[int, float] | None = field(default=None, repr=False)
    """Engine 2: the step and workflow time (seconds) of the last Int attributes' upsert;
    None until the execution's first confirm."""
    reported_usage: Usage = field(default_factory=Usage)
    """Usage hooks reported (`AgentRun.report_usage`), not yet merged into the ledger."""
    tools: dict[str, Tool] = field(default_factory=dict[str, Tool])
    """The run's inventory: the agent's tools (and those its capabilities contribute), plus
    tools the run discovers as it goes. A copy: nothing a run adds reaches the shared agent."""
    model: str = ""
    """The model the run's own requests start from: the agent's, or the input's override."""
    mcp_listings: dict[str, list[MCPToolSpec]] = field(default_factory=dict[str, list[MCPToolSpec]])
    """The last tool list of each MCP server, as recorded (see `mcp_tools`)."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """The settings the run's own requests start from: the agent's, `stream` as the input says
    (set by `AgentRun` when it starts the run)."""
    _paired: tuple[list[Message], Counter[str]] | None = field(default=None, repr=False)
    """A prefix of `messages` without unpaired calls, and the returns its calls left unused."""
    record_state: bool = False
    """Engine 3: `confirm` records the contributed state in memo `towline.state` when it
    changes (`towline.timetravel.lineage`: what a fork starts from)."""
    recorded_state: dict[str, Any] = field(default_factory=dict[str, Any])
    """The state last recorded in the memo (or carried into this execution)."""
    lineage: Any = None
    """Engine 3: a fork's `towline.forked_from` memo value (carried across continue-as-new)."""
    lineage_details: str = ""
    """Engine 3: a fork's line in the current details, linking the run it was forked from."""
    ledger_headers: bool = False
    """Engine 4: the confirmed counters go in every activity's header (`header`); the memo
    is written with the search attributes, when they are due (`confirm`)."""
    _header: tuple[Counters, Payload] | None = field(default=None, repr=False)
    """Engine 4: the counters of the last header and its payload."""
    waiting_for: str | None = None
    """Engine 4: what a waiting run waits for: approval, tool_result (a client tool's) or
    message (a session's next); memo `towline.waiting` while it waits."""
    hitl: ApprovalState = field(default_factory=lambda: ApprovalState())
    """Engine 4: the run's approval policy, remembered decisions and audit trail."""
    started_as: str = ""
    """The agent the run started as (its `TowlineAgent`); `agent` is the active one, another
    after a handoff."""
    handoffs: list[HandoffRecord] = field(default_factory=list[HandoffRecord])
    """Engine 4: the run's handoffs, in order (`towline.capabilities.Handoff`)."""
    pending_handoff: Any = None
    """A handoff the current batch of tool calls asked for (`workflows.handoffs`), made once
    the batch is recorded."""
    client_tools: dict[str, Tool] = field(default_factory=dict[str, Tool])
    """Engine 5: the input's client tools (`workflows.client_tools`): the run's, so they stay
    in `tools` across handoffs."""
    client_wait: timedelta | None = None
    """Engine 5, a session: its `session_timeout`, the longest a client tool's
    call waits for its result (None: the tool's own timeout alone)."""
    context: Any = None
    """Engine 5: the run's context, typed by the `context_type` (`run_context`), or None."""
    guard_requests: int = 0
    """Engine 5: the guard model requests made so far (`requests_paid`), carried on
    continue-as-new (`ResumeState.guard_requests`)."""
    instructions: dict[str, str] = field(default_factory=dict[str, str])
    """Engine 5: by agent, the text its instructions function gave (`workflows.instructions`)."""

    def __post_init__(self) -> None:
        if not self.tools:
            self.tools = dict(self.agent.inventory)
        if not self.model:
            self.model = self.agent.model_name
        if not self.started_as:
            self.started_as = self.agent.name

    def new_id(self) -> str:
        """A fresh deterministic id (for messages and missing tool call ids)."""
        return workflow.uuid4().hex[:16]

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
        """The model requests `request_limit` bounds: from engine 5, the run's own
        (`counters.requests`) and its guard models' (`guard_requests`); before, its own. The
        ledger's `requests` stays the run's own, so that request n's header says n - 1."""
        if not at_least(5):
            return self.counters.requests
        return self.counters.requests + self.guard_requests

    def check_spend(self) -> None:
        """Fail the run if its tokens or its known cost exceed the run's limits."""
        total = self.limits.total_tokens_limit
        if total is not None and self.counters.total_tokens > total:
            raise runtime_failure(UsageLimitExceeded(
                f"total_tokens_limit {total} exceeded ({self.counters.total_tokens} tokens)"
            ))
        cost = self.limits.cost_limit
        spent = self.counters.cost_micros or 0
        if cost is not None and spent > round(cost * 1_000_000):
            raise runtime_failure(UsageLimitExceeded(
                f"cost_limit ${cost:g} exceeded (${spent / 1_000_000:.6f} spent)"))

    def merge_reported_usage(self) -> None:
        """Fold usage reported by hooks into the totals (at a commit, or when the run fails)."""
        if self.reported_usage != Usage():
            self.add_usage(self.reported_usage)
            self.reported_usage = Usage()

    def append(self, message: Message) -> Message:
        """Append to the canonical history, giving the message an id if it has none."""
        if not message.id:
            message = message.model_copy(update={"id": self.new_id()})
        self.messages.append(message)
        return message

    def confirm(self, status: RunStatus | None = None) -> None:
        """A confirmed transition: upsert what changed of the visible counters (memo and search
        attributes) when they are due, and show the counters in the current details.

        Engine 4 (`ledger_headers`): the confirmed counters ride on the next activity's
        header, so the memo `towline.counters` and the search attributes are written together,
        when due (`_attributes_due`: an execution's first confirm, every status change, at most
        every `ATTRIBUTE_STEPS` steps or `ATTRIBUTE_SECONDS` between). Before, the memo was
        written at every change of the counters (the snapshots in the history are then exactly
        the sequence of distinct confirmed counters), and the search attributes (engine 2,
        `sparse_attributes`) when due or (earlier) at every change.
        """
        changed_status = status is not None and status != self.status
        if status is not None:
            self.status = status
        due = self._attributes_due(changed_status) if self.sparse_attributes else True
        memo: dict[str, Any] = {}
        state_changed = self.record_state and self.state != self.recorded_state
        # engine 4: the counters join a state snapshot's command (it costs no event of its own)
        counters_due = due or state_changed or not self.ledger_headers
        if counters_due and self.counters != self.recorded_counters:
            memo[MEMO_KEY] = to_proto(self.counters)
            self.recorded_counters = self.counters
        if state_changed:  # one command with the counters
            memo[STATE_MEMO] = state_snapshot(self.state, workflow.payload_converter())
            self.recorded_state = copy.deepcopy(self.state)
        if due:  # engine 4: the trail and the waiting reason follow the ledger memo's cadence
            waiting = self.waiting_for if self.status == RunStatus.WAITING else None
            trail, self.hitl.recorded = trail_memo(self.hitl, waiting)
            memo.update(trail)
        if memo:
            workflow.upsert_memo(memo)
        if due:
            self._upsert_attributes()
        workflow.set_current_details(self.details())

    def header(self) -> Payload:
        """Engine 4: the `towline.counters` header of an activity scheduled now (the confirmed
        counters, `json/protobuf`), converted once per value of the counters. The current
        details (free: no event) show them from here on, so they are never behind a header."""
        cached = self._header
        if cached is None or cached[0] != self.counters:
            payload = workflow.payload_converter().to_payloads([to_proto(self.counters)])[0]
            cached = self._header = (self.counters, payload)
            workflow.set_current_details(self.details())
        return cached[1]

    def _attributes_due(self, changed_status: bool) -> bool:
        """Engine 2: whether this confirm upserts the search attributes that changed."""
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
            (sa.AGENT, self.started_as),
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
        return current_details(self.agent.name, self.status, self.counters, self.handoffs,
                               self.pending_approvals, self.waiting_for, self.lineage_details,
                               self.usage.native_tool_uses)

    def carried_memo(self) -> dict[str, Any]:
        """Engine 3: the memo keys besides the ledger that continue-as-new carries."""
        memo: dict[str, Any] = {}
        if self.lineage is not None:
            memo[FORKED_FROM_MEMO] = self.lineage
        if self.record_state and self.state:
            memo[STATE_MEMO] = state_snapshot(self.state, workflow.payload_converter())
        if self.hitl.total:
            memo[DECISIONS_MEMO] = {"total": self.hitl.total, "entries": self.hitl.audit}
        return memo

    def close_unpaired(self, reason: str) -> None:
        """Give every tool call without a return a `not_executed` record (no unpaired calls).

        Counted per id, not as a set: a model may reuse an id in a later response
        (some providers number calls from `call_0` in every response), and that
        later call needs its own return.
        """
        # Called at every step: only the messages after the prefix found paired last time
        # are scanned (a paired prefix stays paired; its unused returns are carried over).
        start, returned = 0, Counter[str]()
        if self._paired is not None:
            prefix, surplus = self._paired
            if len(prefix) <= len(self.messages) and self.messages[:len(prefix)] == prefix:
                start, returned = len(prefix), Counter(surplus)
        returned.update(
            p.tool_call_id for m in self.messages[start:] if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)
        )
        groups: list[tuple[int, list[ToolReturnPart]]] = []
        for index, m in enumerate(self.messages[start:], start):
            missing: list[ToolReturnPart] = []
            for c in m.tool_calls if isinstance(m, ModelResponse) else []:
                if returned[c.tool_call_id] > 0:
                    returned[c.tool_call_id] -= 1
                else:
                    missing.append(ToolReturnPart(tool_name=c.tool_name, tool_call_id=c.tool_call_id,
                                                  content=reason, status="not_executed"))
            if missing:
                groups.append((index, missing))
        for index, missing in reversed(groups):  # from the end, so earlier indexes stay valid
            self._insert_returns(index, missing)
        self._paired = (list(self.messages), +returned)

    def release_messages(self) -> None:
        """Empty the conversation in place (its execution has ended and carried it on)."""
        self.messages.clear()
        self._paired = None

    def record_returns(self, parts: list[ToolReturnPart]) -> None:
        """Record return records right after the response that made their calls.

        After its earlier returns, but before anything a hook added later (an
        `after_model` feedback message, say), so every call is answered next to
        where it was made, as providers require.
        """
        ids = {p.tool_call_id for p in parts}
        for index in range(len(self.messages) - 1, -1, -1):
            m = self.messages[index]
            if isinstance(m, ModelResponse) and any(c.tool_call_id in ids for c in m.tool_calls):
                self._insert_returns(index, parts)
                return
        self.append(ModelRequest(parts=list(parts)))

    def _insert_returns(self, response_index: int, parts: list[ToolReturnPart]) -> None:
        at = response_index + 1
        while at < len(self.messages) and _is_returns(self.messages[at]):
            at += 1
        self.messages.insert(at, ModelRequest(id=self.new_id(), parts=list(parts)))

    def partial(self) -> PartialRun:
        """What the run has done so far, for a failure's details."""
        return PartialRun(
            messages=list(self.messages), usage=self.usage, counters=self.counters,
            state=dict(self.state), request_count=self.counters.requests, run_id=self.run_id,
            handoffs=list(self.handoffs),
        )

    def fitted_partial(self) -> PartialRun:
        """`partial()`, with the oldest messages dropped until it fits in one payload."""
        partial = self.partial()
        while partial.messages and oversize(partial):
            partial = partial.model_copy(update={"messages": partial.messages[len(partial.messages) // 4 + 1:]})
        if partial.state and oversize(partial):  # the state alone is too large: left out
            partial = partial.model_copy(update={"state": {}})
        return partial
