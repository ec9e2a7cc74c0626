"""What a run takes and gives: `RunInput`, `RunResult`, `PartialRun`, `Counters`, and where a
live run is: the `state` query's `StateQueryResult` with its `PendingApproval`s (the workflow
returns it, `towline.client.RunHandle` reads it back, `docs/schemas/` derive from it).

`RunInput` is plain JSON so that a run can be started from the `temporal` CLI or
the Temporal UI as well as from Python.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from temporalio.contrib.workflow_streams import WorkflowStreamState

from towline.mcp.spec import MCPToolSpec
from towline.messages import Message, Usage, UserContent, no_messages
from towline.options import Limits
from towline.runtime.payloads import PAYLOAD_LIMIT
from towline.runtime.request_chain import RequestChain

__all__ = ["RunStatus", "Counters", "ClientToolSpec", "RunInput", "RunResult", "PartialRun", "ResumeState", "WorkerFacts",
           "HandoffRecord", "LEDGER_SCHEMA_VERSION", "PendingApproval", "StateQueryResult"]

PRIORITY_MIN = 1
"""The highest priority (dispatched first)."""
PRIORITY_MAX = 5
"""The lowest priority (Temporal's default range is 1-5; unset means 3)."""
TENANT_MAX_BYTES = 64
"""Temporal's limit on a fairness key, in bytes (UTF-8)."""


class RunStatus(StrEnum):
    """Where a run is, in its own words: the `TowlineStatus` search attribute, the memo's
    details and the `state` query's `status` carry these values (a `str`, so each compares
    equal to, and is written as, its value)."""

    STARTING = "starting"
    """The run has not yet decoded its input (the `state` query only)."""
    RUNNING = "running"
    """Working: a model request, a tool call, a handoff."""
    WAITING = "waiting"
    """Waiting for a decision, a client tool's result or a session's next message."""
    SUCCEEDED = "succeeded"
    """Ended with a result."""
    FAILED = "failed"
    """Ended with a run failure (`towline.errors.RunFailure`)."""


LEDGER_SCHEMA_VERSION = 3
"""2: `cost_micros` and `unpriced_requests` were added (absent from version 1 snapshots);
3: `agent_version` (absent from earlier snapshots)."""


class Counters(BaseModel):
    """The confirmed, runtime-owned counters of a run (the ledger, `towline.v1.RunCounters`)."""

    model_config = ConfigDict(frozen=True)

    tool_retries: dict[str, int] = Field(default_factory=dict)
    """Per tool name: consecutive failures, reset when that tool succeeds."""
    output_retries_used: int = 0
    """Invalid outputs the model has been asked to correct."""
    run_step: int = 0
    """The number of the last model request made (turn), from 1."""
    tool_calls: int = 0
    """Tool executions started."""
    max_steps: int = 0
    """The run's `max_steps` limit."""
    output_retries: int = 0
    """The run's `output_retries` limit."""
    requests: int = 0
    """Model activity calls made (a wrapper may make several per step)."""
    input_tokens: int = 0
    """Input tokens, hooks' `llm_usage` included."""
    output_tokens: int = 0
    """Output tokens, hooks' `llm_usage` included."""
    schema_version: int = LEDGER_SCHEMA_VERSION
    """Version of this record's schema; older histories are read as written."""
    cost_micros: int | None = None
    """Spend in millionths of a US dollar of the requests whose price is known (hooks'
    included); None until a response reports a price or an unknown price (offline models
    report neither), and in snapshots written before towline tracked cost."""
    unpriced_requests: int = 0
    """Model requests whose price is not known; `cost_micros` is then a lower bound."""
    agent_version: str | None = None
    """The version of the agent definition the run started with (`towline.runtime.fingerprint`);
    None in snapshots written before towline recorded versions."""

    @classmethod
    def starting(cls, limits: Limits, agent_version: str | None) -> Counters:
        """A new run's counters: nothing done yet, its limits and its agent's version."""
        return cls(max_steps=limits.max_steps, output_retries=limits.output_retries,
                   agent_version=agent_version)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def known_cost_micros(self) -> int | None:
        """`cost_micros` when it is recorded and every request's price is known, else None."""
        return self.cost_micros if self.unpriced_requests == 0 else None


class WorkerFacts(BaseModel):
    """What the worker that started a run found, recorded in the run's history.

    The `towline.runtime.search_attributes` local activity answers it when a run starts (its
    marker makes replay independent of the replaying worker), and continue-as-new
    carries it, so later executions ask no worker again.
    """

    model_config = ConfigDict(extra="forbid")

    attributes: list[str] = Field(default_factory=list)
    """The towline search attributes the namespace has registered: the only ones upserted."""
    payload_limit: int = Field(default=PAYLOAD_LIMIT, gt=0)
    """The largest payload the run may write (larger with a payload store)."""
    model_queues: dict[str, str] = Field(default_factory=dict)
    """Model-name pattern -> task queue of the run's model calls, first match wins
    (`towline.fleet.routing`; empty: the run's own queue)."""


class HandoffRecord(BaseModel):
    """One handoff of a run (`towline.capabilities.Handoff`): from then on it ran as `to_agent`."""

    model_config = ConfigDict(frozen=True)

    step: int
    """The run step whose response called the handoff tool."""
    from_agent: str
    """The agent that handed the run over."""
    to_agent: str
    """The agent the run went on as."""
    call_id: str
    """The handoff tool call's id."""


class ResumeState(BaseModel):
    """Everything a run carries across continue-as-new, exactly (set by the runtime only)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Message]
    state: dict[str, Any]
    counters: Counters
    usage: Usage
    pending_approvals: dict[str, Any] = Field(default_factory=dict)
    root_run_id: str
    inbox: list[str | list[UserContent]] = Field(default_factory=list[str | list[UserContent]])
    """Messages `send` queued that the run has not taken yet (text, or text and media)."""
    mcp_listings: dict[str, list[MCPToolSpec]] = Field(default_factory=dict)
    """The MCP servers' last tool lists (a run that lists once keeps its tools)."""
    approvals: dict[str, Any] | None = None
    """The run's approval policy, remembered decisions, audit trail and call index."""
    stream: WorkflowStreamState | None = None
    """The live events' stream state (offsets, recent events) for the next execution."""
    facts: WorkerFacts | None = None
    """The run's `WorkerFacts` (absent from executions continued by earlier code)."""
    chain: RequestChain | None = None
    """The key of the messages last sent to a model, so the next request names them."""
    handoffs: list[HandoffRecord] = Field(default_factory=list[HandoffRecord])
    """The run's handoffs so far: the next execution goes on as the last one's `to_agent`."""
    instructions: dict[str, str] = Field(default_factory=dict[str, str])
    """By agent name, the text its instructions function gave (asked once a run)."""
    guard_requests: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    """The guard model requests the run made so far (`request_limit` counts them
    beside the ledger's `requests`, which are the run's own)."""


class ClientToolSpec(BaseModel):
    """A tool a client runs, as a `RunInput` names it: a name, a description and JSON schemas."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Unique among the run's tools."""
    description: str = ""
    """Shown to the model."""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """The JSON schema of the arguments."""
    result_schema: dict[str, Any] | None = None
    """What a result must match (None: any JSON)."""
    timeout: timedelta | None = Field(default=None, gt=timedelta(0))
    """How long a call waits for its result (None: indefinitely, or in a session
    at most its `session_timeout`); then the call is `unknown` (the run fails
    `UncertainToolEffect`), or `denied` when `idempotent` (the model is told)."""
    idempotent: bool = False
    """The tool may be run again safely, so a call that timed out is `denied` (the
    model may ask again) rather than of uncertain effect."""
    metadata: dict[str, Any] | None = None
    """What the client needs besides the arguments to run a call (a form's title,
    a widget id...): on each pending call (the `state` query, `towline pending`) and its
    `client_tool` event."""


class RunInput(BaseModel):
    """The input of the `AgentRun` workflow (unknown fields are refused, not ignored)."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    """The registered agent's name."""
    prompt: str | list[UserContent] | None = None
    """The user prompt that starts the run: text, or a list of text and media parts
    (`ImageUrl`, `DocumentUrl`, `BinaryContent`, whose bytes are base64 in JSON)."""
    message_history: list[Message] | None = None
    """Earlier conversation to continue from."""
    limits: Limits | None = None
    """Overrides the agent's limits for this run."""
    context: dict[str, Any] | None = None
    """The run's context: fields of the agent's `context_type` (handed to its tools, hooks
    and instructions function, typed) and initial values of contributed state keys. Any
    other key, or an ill-typed value, ends the run with `InvalidRunInput` naming it."""
    client_tools: list[ClientToolSpec] | None = None
    """Tools the client runs, offered to the model beside the agent's (an AG-UI
    client's `tools`): their calls wait for results from outside (`tool_result`)."""
    allowed_tools: list[str] | None = None
    """Ancestor authority: a sub-agent run may execute only these tools."""
    model: str | None = None
    """Runs the agent on this model instead of its own (e.g. `"anthropic:claude-sonnet-4-5"`).
    The worker must allow it (`TowlinePlugin(allowed_models=...)`), else `InvalidRunInput`."""
    stream: bool | None = None
    """Stream the model's text to the run's live events (`towline watch`); None: as the
    agent's `ModelSettings.stream` says."""
    session: bool = False
    """Keep the run open after an answer for the next `send` (until idle or cancelled)."""
    session_timeout: timedelta = Field(default=timedelta(hours=1), gt=timedelta(0))
    """How long a session waits for the next message before completing (positive)."""
    on_busy: Literal["queue", "interrupt", "reject"] = "queue"
    """A session: what a `send` does while a turn runs. `queue`: it waits its turn;
    `interrupt`: the model request in flight is cancelled and the run asks again with it;
    `reject`: the send is refused (the run is busy)."""
    continue_as_new_after_events: int | None = Field(default=None, ge=1)
    """Also continue-as-new once the history has more events than this (for tests).

    A run always continues-as-new when Temporal suggests it (a long history);
    this lowers the threshold so tests can exercise continue-as-new without a
    huge history. `None` keeps Temporal's suggestion as the only trigger.
    """
    priority: int | None = Field(default=None, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    """Temporal's priority key of the run and of every activity and child run it schedules:
    1 is dispatched first, 5 last (None: Temporal's default, 3). See `towline.fleet.routing`."""
    tenant: str | None = Field(default=None, min_length=1)
    """Temporal's fairness key of the same: backlogged tasks are shared out fairly between
    tenants (at most `TENANT_MAX_BYTES`, 64 bytes in UTF-8; None: no tenant)."""
    resume: ResumeState | None = None
    """Set by the runtime on continue-as-new; never by users."""

    @field_validator("tenant")
    @classmethod
    def _tenant_fits(cls, value: str | None) -> str | None:
        # Temporal's limit is in bytes: 64 characters of another script can be 256 of them
        if value is not None and len(value.encode()) > TENANT_MAX_BYTES:
            raise ValueError(f"tenant is {len(value.encode())} bytes in UTF-8; "
                             f"at most {TENANT_MAX_BYTES}")
        return value


class PartialRun(BaseModel):
    """What a failed run had done: carried in the failure's details."""

    messages: list[Message] = Field(default_factory=no_messages)
    usage: Usage = Field(default_factory=Usage)
    counters: Counters = Field(default_factory=Counters)
    state: dict[str, Any] = Field(default_factory=dict)
    request_count: int = 0
    run_id: str = ""
    handoffs: list[HandoffRecord] = Field(default_factory=list[HandoffRecord])
    """The run's handoffs (its last `to_agent` was active when it failed)."""


class RunResult(BaseModel):
    """The result of a successful run."""

    output: Any
    """The final output: text, or the validated `output_type` value as JSON."""
    messages: list[Message]
    """The canonical history."""
    usage: Usage
    """Total usage (model calls and hooks' `llm_usage`)."""
    counters: Counters
    """The final ledger."""
    state: dict[str, Any] = Field(default_factory=dict)
    """Contributed state keys."""
    run_id: str = ""
    """The workflow id."""
    handoffs: list[HandoffRecord] = Field(default_factory=list[HandoffRecord])
    """The run's handoffs, in order (`towline.capabilities.Handoff`): the last one's
    `to_agent` gave the output; none when the agent it started as did."""
    session_end: Literal["request", "idle"] | None = None
    """How a session ended: `request` (the `end` signal, `towline end`), `idle` (no message
    came within `session_timeout`); None for a run that is not a session."""


class PendingApproval(BaseModel):
    """A tool call waiting for a person's decision (kind `approval`) or a client tool's result
    (kind `client`), as the `state` query shows it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    call_id: str
    """The tool call's id (the key it is listed under; what a decision names)."""
    workflow_id: str
    """The run it waits in."""
    tool_name: str
    """The tool the model called."""
    args: dict[str, Any]
    """The call's arguments, as validated."""
    run_step: int | None = None
    """The model request that made the call (the run always gives it: None only for a call a
    client names by id without having read the run's state)."""
    digest: str | None = None
    """What a decision names to be bound to this call (always given by the run)."""
    index: int | None = None
    """The call's short number, which `towline approve RUN N` takes (#1, #2, ...; always given
    by the run)."""
    requested_at: datetime | None = None
    """When the run started waiting (workflow time, ISO 8601; always given by the run)."""
    kind: str = "approval"
    """`approval` (a person decides) or `client` (a client tool's result is awaited)."""
    decisions: list[str] = ["approve", "reject"]
    """What may be decided: approve, reject, edit, respond."""
    expires_at: datetime | None = None
    """When the wait times out (absent: it does not)."""
    metadata: dict[str, Any] | None = None
    """What the call's rule attached for the reviewer (`Ask(metadata=...)`, or hook code's
    `request_approval(metadata=...)`), or a client tool's `metadata` (what its client needs to
    run the call); absent when none did."""

    def waited(self, now: datetime) -> timedelta | None:
        """How long the call has waited by `now` (None: not known)."""
        return None if self.requested_at is None else max(now - self.requested_at, timedelta())

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """The JSON form (`towline pending --json`; with `now`, how long it has waited)."""
        waited = self.waited(now) if now is not None else None
        return {**self.model_dump(mode="json"),
                "waited_seconds": round(waited.total_seconds(), 3) if waited is not None else None}


class StateQueryResult(BaseModel):
    """The answer of the `state` query: where the run is, without its conversation."""

    agent: str | None = None
    """The active agent's name: the one the run started as, or the one it was last handed to
    (None before the run has decoded its input)."""
    status: RunStatus = RunStatus.STARTING
    """`starting`, `running`, `waiting` (for an approval, or a session's next message),
    `succeeded` or `failed` (the `TowlineStatus` search attribute): a `RunStatus`."""
    counters: Counters | None = None
    """The confirmed counters (the ledger); None while starting."""
    usage: Usage | None = None
    """Token usage so far; None while starting."""
    pending_approvals: dict[str, PendingApproval] = {}
    """The calls waiting for a decision, keyed by tool call id (the `call_id` of the
    `approve` and `reject` updates): an object, empty when none waits."""
    state: dict[str, Any] = {}
    """The run's contributed state keys (capabilities' and middleware's)."""
    waiting_for: str | None = None
    """While `waiting`: `approval`, `tool_result` (a client tool's) or `message` (a session's)."""
    remembered: list[dict[str, Any]] = []
    """Decisions remembered for the run or the session (tool, pattern, kind, scope, by)."""
    policy: dict[str, Any] = {}
    """The run's own approval rules (`set_policy`): `{"rules": {...}, "default": ...}`."""
    decisions: list[dict[str, Any]] = []
    """The newest entries of the audit trail (who, when, why, digest, rule or person)."""
    decisions_total: int = 0
    """How many audit entries the run has recorded."""
    handoffs: list[HandoffRecord] = []
    """The run's handoffs so far, in order (`towline.capabilities.Handoff`)."""

    def pending(self) -> list[PendingApproval]:
        """The pending calls, in the order they were asked (by their short number)."""
        return sorted(self.pending_approvals.values(), key=lambda c: (c.index is None, c.index or 0, c.call_id))
