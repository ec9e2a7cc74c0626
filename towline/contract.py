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

from pydantic import TypeAdapter

from towline.messages import Message
from towline.results import PartialRun, PendingApproval, RunInput, RunResult, StateQueryResult
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
