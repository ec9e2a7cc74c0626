"""`Run`: the mutable, workflow-owned record of one run, composed of named parts.

What the run is (its agent, limits, model and settings, context, instructions, handoffs) is
held here; the rest is in its parts: `inventory` (its tools, `workflows.inventory`),
`conversation` (the messages,
`workflows.conversation`), `ledger` (counters, usage, status and what the run records of
them, `workflows.ledger`) and `approvals` (calls waiting for a decision, the policy and the
audit trail, `workflows.waiting`). Only the runtime writes here. Hooks see copies; what they
return is checked before anything here changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow

from towline.agent import Agent
from towline.errors import PayloadTooLarge
from towline.fleet.routing import Dispatch
from towline.options import Limits, ModelSettings
from towline.results import HandoffRecord, PartialRun
from towline.runtime.payloads import PAYLOAD_LIMIT, payload_size
from towline.runtime.request_chain import RequestBook

from .conversation import Conversation
from .events import RunStream
from .inventory import Inventory
from .ledger import Ledger
from .steering import Steering
from .waiting import Approvals

__all__ = ["Run", "PAYLOAD_LIMIT", "oversize", "check_state_fits"]


def oversize(value: Any, limit: int) -> int:
    """Bytes `value` would take as a payload of this workflow if over `limit` (the run's is
    `Run.payload_limit`), else 0."""
    size = payload_size(workflow.payload_converter(), value)
    return 0 if size <= limit else size


def check_state_fits(state: Mapping[str, Any], writers: Mapping[str, str], limit: int) -> None:
    """Fail the run `PayloadTooLarge` if a written key (`writers`: key -> the hook or tool that
    wrote it) makes `state` too large for a payload of `limit` bytes (the run's): the state goes
    into every tool's context, the run's result and its failure, so it would fail a workflow
    task forever."""
    if not oversize(dict(state), limit):
        return
    sizes = {key: oversize({key: state.get(key)}, 0) for key in writers}
    key = max(sizes, key=lambda k: sizes[k])
    raise PayloadTooLarge(
        f"{writers[key]} wrote state key {key!r} ({sizes[key]} bytes): the run's state is over "
        f"the {limit}-byte payload limit. Keep large values out of run state (in "
        "a file or a store, with their reference in state)")


@dataclass
class Run:
    """The state of a run that only the runtime changes."""

    agent: Agent
    run_id: str
    limits: Limits
    conversation: Conversation
    """The run's messages (`workflows.conversation`)."""
    state: dict[str, Any]
    ledger: Ledger
    """The confirmed counters, usage and status, and what the run records of them
    (`workflows.ledger`)."""
    approvals: Approvals = field(default_factory=lambda: Approvals())
    """The calls waiting for a decision, the approval policy, the audit trail, what the run
    waits for (`workflows.waiting`)."""
    inventory: Inventory = field(default_factory=lambda: Inventory())
    """The run's tools: the agent's, the client's, MCP servers', the allowed subset
    (`workflows.inventory`)."""
    model: str = ""
    """The model the run's own requests start from: the agent's, or the input's override."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """The settings the run's own requests start from: the agent's, `stream` as the input says
    (set by `AgentRun` when it starts the run)."""
    started_as: str = ""
    """The agent the run started as (its `TowlineAgent`); `agent` is the active one, another
    after a handoff."""
    handoffs: list[HandoffRecord] = field(default_factory=list[HandoffRecord])
    """The run's handoffs, in order (`towline.capabilities.Handoff`)."""
    pending_handoff: Any = None
    """A handoff the current batch of tool calls asked for (`workflows.handoffs`), made once
    the batch is recorded."""
    context: Any = None
    """The run's context, typed by the `context_type` (`run_context`), or None."""
    instructions: dict[str, str] = field(default_factory=dict[str, str])
    """By agent, the text its instructions function gave (`workflows.instructions`)."""
    # The run's own objects, handed to what it runs with the run (`AgentRun` makes them before
    # the run starts: its handlers share them): never looked up from the workflow instance.
    stream: RunStream | None = None
    """The run's live events (`workflows.events`)."""
    steering: Steering = field(default_factory=Steering)
    """A cancel, an interrupting `send` (`workflows.steering`)."""
    request_book: RequestBook = field(default_factory=RequestBook)
    """The model requests by reference (`towline.runtime.request_chain`)."""
    dispatch: Dispatch = field(default_factory=Dispatch)
    """Fleet: the run's model routes and priority (`towline.fleet.routing`)."""
    payload_limit: int = PAYLOAD_LIMIT
    """The run's payload limit: `PAYLOAD_LIMIT`, or its store's (`WorkerFacts.payload_limit`)."""

    def __post_init__(self) -> None:
        if not self.inventory.tools:
            self.inventory.tools = dict(self.agent.inventory)
        if not self.model:
            self.model = self.agent.model_name
        if not self.started_as:
            self.started_as = self.agent.name
        self.ledger.run = self  # what the ledger records besides its own fields

    def partial(self) -> PartialRun:
        """What the run has done so far, for a failure's details."""
        return PartialRun(
            messages=list(self.conversation.messages), usage=self.ledger.usage,
            counters=self.ledger.counters, state=dict(self.state),
            request_count=self.ledger.counters.requests, run_id=self.run_id,
            handoffs=list(self.handoffs),
        )

    def fitted_partial(self) -> PartialRun:
        """`partial()`, with the oldest messages dropped until it fits in one payload."""
        partial = self.partial()
        while partial.messages and oversize(partial, self.payload_limit):
            partial = partial.model_copy(update={"messages": partial.messages[len(partial.messages) // 4 + 1:]})
        # the state alone is too large: left out
        if partial.state and oversize(partial, self.payload_limit):
            partial = partial.model_copy(update={"state": {}})
        return partial
