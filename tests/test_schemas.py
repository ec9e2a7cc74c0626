"""The JSON Schemas of the client contract (`docs/schemas/`, `towline.contract`): the files are
what the models generate, real payloads of a real run validate against them, and a wrong
update shape is refused with a message naming the field.

One run of `careful-calculator` through the plain Temporal client (no towline converter: the
JSON a client in another language sees): its input, its `state` while a call waits, a
refused and an accepted `approve`, its result and conversation; and one failed run's
details; and a session's `send` with a wrong shape.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from readme import REPO
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from examples.calculator import agents
from tests.cli_helpers import until_state
from towline.contract import SCHEMAS, json_schemas, schema_text
from towline.testing import towline_worker

SCHEMA_DIR = REPO / "docs" / "schemas"


def _validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMA_DIR / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _valid(name: str, value: Any) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in _validator(name).iter_errors(value)]
    assert not errors, (name, errors)


def test_the_committed_schemas_are_what_the_models_generate() -> None:
    generated = json_schemas()
    assert sorted(generated) == sorted(e.name for e in SCHEMAS)
    committed = {p.stem: p.read_text(encoding="utf-8") for p in SCHEMA_DIR.glob("*.json")}
    assert sorted(committed) == sorted(generated), "run python scripts/gen_schemas.py"
    stale = [name for name, schema in generated.items() if committed[name] != schema_text(schema)]
    assert not stale, f"stale schemas {stale}: run python scripts/gen_schemas.py"


def test_the_schemas_refuse_what_the_workflow_refuses() -> None:
    _valid("RunInput", {"agent": "calculator", "prompt": "What is 6 times 7?"})
    assert list(_validator("RunInput").iter_errors({"agent": "calculator", "promt": "hi"}))
    assert list(_validator("ApprovalDecision").iter_errors({"callId": "call_1"}))
    assert list(_validator("SendInput").iter_errors({"content": 6}))


async def test_a_real_run_speaks_the_published_schemas(client: Client) -> None:
    async with towline_worker(client, agents) as (_, queue):
        start = {"agent": "careful-calculator", "prompt": "What is 6 times 7?"}
        _valid("RunInput", start)
        handle = await client.start_workflow("AgentRun", start, id=f"schema-{uuid.uuid4().hex[:8]}",
                                             task_queue=queue)
        state = await until_state(handle, lambda s: bool(s.get("pending_approvals")))
        _valid("StateQueryResult", state)
        assert state["status"] == "waiting"
        assert isinstance(state["pending_approvals"], dict)  # keyed by call id, as documented
        (call_id, call), = state["pending_approvals"].items()
        assert call["tool_name"] == "multiply" and call["args"] == {"a": 6, "b": 7}

        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("approve", {"callId": call_id})
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.message == (
            'the approve update takes one ApprovalDecision such as {"call_id": "call_1"}: '
            "call_id: Field required; callId: unknown field (did you mean 'call_id'?)")
        with pytest.raises(WorkflowUpdateFailedError) as not_an_object:
            await handle.execute_update("reject", call_id)
        assert "reject update takes one ApprovalDecision" in str(not_an_object.value.cause)
        assert "not a JSON str" in str(not_an_object.value.cause)

        decision = {"call_id": call_id, "reason": "checked"}
        _valid("ApprovalDecision", decision)
        assert await handle.execute_update("approve", decision) == "approved"
        result = await handle.result()
        _valid("RunResult", result)
        assert result["output"] == "6 times 7 is 42."
        _valid("Messages", await handle.query("messages"))
        _valid("StateQueryResult", await handle.query("state"))

        failed = await client.start_workflow(
            "AgentRun", {"agent": "calculator", "prompt": "What is 6 times 7?",
                         "limits": {"max_steps": 1}},
            id=f"schema-failed-{uuid.uuid4().hex[:8]}", task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await failed.result()
        error = failure.value.cause
        assert isinstance(error, ApplicationError) and error.type == "MaxStepsExceeded"
        _valid("PartialRun", error.details[0])


async def test_send_with_a_wrong_shape_names_the_field(client: Client) -> None:
    async with towline_worker(client, agents) as (_, queue):
        handle = await client.start_workflow(
            "AgentRun", {"agent": "calculator", "prompt": "What is 6 times 7?", "session": True},
            id=f"schema-send-{uuid.uuid4().hex[:8]}", task_queue=queue)
        await until_state(handle, "waiting")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("send", {"text": "And 2 plus 3?"})
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.message == (
            'the send update takes one SendInput such as {"content": "And 2 plus 3?"}: '
            "content: Field required; text: unknown field")
        answer = await handle.execute_update("send", {"content": "And 2 plus 3?"})
        assert answer == "2 plus 3 is 5."
        await handle.signal("end")
        await handle.result()
