"""What a client in any language exchanges with an `AgentRun`, as JSON Schemas.

An `AgentRun` is started, queried, updated and signalled by name, with JSON payloads
(Temporal's `json/plain` encoding), so a client needs no towline code: Node's
`@temporalio/client`, Go's, Java's, the `temporal` CLI. `SCHEMAS` names each payload
with the pydantic model the workflow decodes it with (or, for a query's answer, a model
describing what it returns); `json_schemas()` renders them, and
``python scripts/gen_schemas.py`` writes them to ``docs/schemas/`` where
`tests/test_schemas.py` checks them against these models and against real runs.

The schemas are pydantic's *validation* schemas: what the workflow accepts for an input,
and what a result validates against for an output (towline writes messages without their
default fields, which every reader's defaults restore).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from towline.messages import Message, Usage
from towline.results import Counters, HandoffRecord, PartialRun, RunInput, RunResult, RunStatus
from towline.workflows import (
    ApprovalDecision,
    Decisions,
    EditDecision,
    PolicyUpdate,
    RespondDecision,
    SendInput,
    ToolResultInput,
)

__all__ = ["PendingApproval", "StateQueryResult", "ContractEntry", "SCHEMAS", "json_schemas",
           "schema_text"]


class PendingApproval(BaseModel):
    """A tool call waiting for a person's decision, as the `state` query shows it."""

    model_config = ConfigDict(extra="allow")

    tool_name: str
    """The tool the model called."""
    args: dict[str, Any]
    """The call's arguments, as validated."""
    run_step: int
    """The model request that made the call."""
    requested_at: str
    """When the run started waiting (workflow time, ISO 8601)."""
    digest: str | None = None
    """What a decision names to be bound to this call (engine 4)."""
    index: int | None = None
    """The call's short number, which `towline approve RUN N` takes (engine 4)."""
    kind: str = "approval"
    """`approval` (a person decides) or `client` (a client tool's result is awaited)."""
    decisions: list[str] = ["approve", "reject"]
    """What may be decided: approve, reject, edit, respond."""
    expires_at: str | None = None
    """When the wait times out (absent: it does not)."""
    metadata: dict[str, Any] | None = None
    """What the call's rule attached for the reviewer (`Ask(metadata=...)`, or hook code's
    `request_approval(metadata=...)`), or a client tool's `metadata` (what its client needs to
    run the call); absent when none did (engine 5)."""


class StateQueryResult(BaseModel):
    """The answer of the `state` query: where the run is, without its conversation."""

    agent: str | None
    """The active agent's name: the one the run started as, or the one it was last handed to
    (None before the run has decoded its input)."""
    status: RunStatus
    """`starting`, `running`, `waiting` (for an approval, or a session's next message),
    `succeeded` or `failed` (the `TowlineStatus` search attribute): a `RunStatus`."""
    counters: Counters | None
    """The confirmed counters (the ledger); None while starting."""
    usage: Usage | None
    """Token usage so far; None while starting."""
    pending_approvals: dict[str, PendingApproval]
    """The calls waiting for a decision, keyed by tool call id (the `call_id` of the
    `approve` and `reject` updates): an object, empty when none waits."""
    state: dict[str, Any]
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


@dataclass(frozen=True)
class ContractEntry:
    """One payload of the contract."""

    name: str
    """The schema's name: ``docs/schemas/<name>.json``."""
    role: str
    """Where it travels, e.g. "the `approve` and `reject` updates' argument"."""
    type: Any
    """The pydantic model (or type) it is decoded with."""


SCHEMAS: tuple[ContractEntry, ...] = (
    ContractEntry("RunInput", "the `AgentRun` workflow's input", RunInput),
    ContractEntry("RunResult", "the `AgentRun` workflow's result", RunResult),
    ContractEntry("PartialRun", "a failed run's failure details (an `ApplicationError` whose "
                  "type is the reason)", PartialRun),
    ContractEntry("SendInput", "the `send` update's argument (its result is the answer)",
                  SendInput),
    ContractEntry("ApprovalDecision", "the `approve` and `reject` updates' argument",
                  ApprovalDecision),
    ContractEntry("EditDecision", "the `edit` update's argument", EditDecision),
    ContractEntry("RespondDecision", "the `respond` update's argument", RespondDecision),
    ContractEntry("Decisions", "the `decide` update's argument (its result: the audit entries)",
                  Decisions),
    ContractEntry("PolicyUpdate", "the `set_policy` update's argument (its result: the policy)",
                  PolicyUpdate),
    ContractEntry("ToolResultInput", "the `tool_result` update's argument (a client tool's "
                  "result)", ToolResultInput),
    ContractEntry("StateQueryResult", "the `state` query's answer (no argument)",
                  StateQueryResult),
    ContractEntry("Messages", "the `messages` query's answer (no argument): the conversation",
                  list[Message]),
)
"""Every payload a client exchanges with `AgentRun`. The `cancel` and `end` signals take no
argument; the `towline.model_request_input` and `towline.request_messages` queries serve towline's own
model activities and are not part of it."""


def json_schemas() -> dict[str, dict[str, Any]]:
    """Each entry's JSON Schema (draft 2020-12), by name."""
    schemas: dict[str, dict[str, Any]] = {}
    for entry in SCHEMAS:
        body = TypeAdapter(entry.type).json_schema(mode="validation")
        schemas[entry.name] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$comment": f"{entry.role}; generated from towline's models by "
                        "scripts/gen_schemas.py: do not edit",
            **({"title": entry.name} if "title" not in body else {}),
            **body,
        }
    return schemas


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as its file holds it (indented JSON, one trailing newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
