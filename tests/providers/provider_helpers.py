"""Shared pieces of the provider tests: agents' tools, retry policies, history readers."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from google.protobuf.json_format import MessageToDict
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle
from temporalio.common import RetryPolicy

from towline import tool

__all__ = ["add", "QUICK", "model_attempts", "history_text", "KEY", "towline_show"]


async def towline_show(workflow_id: str, target: str, namespace: str) -> tuple[int, str, str]:
    """`towline show WORKFLOW_ID` as a subprocess: (exit code, stdout, stderr)."""
    import asyncio
    import os
    from pathlib import Path

    from cli_helpers import towline_process

    proc = await towline_process("show", workflow_id, "--address", target, "--namespace", namespace,
                                 env=os.environ, cwd=Path.cwd())
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()

KEY = "sk-test-4f9c2e7a1b8d3c6e5f0a9b2c7d4e1f8a"
"""The API key the tests give the SDKs; it must never show up in a history or a log."""

QUICK = RetryPolicy(initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0,
                    maximum_interval=timedelta(milliseconds=100), maximum_attempts=4)
"""A model retry policy for tests: Temporal retries quickly."""


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def model_attempts(events: list[HistoryEvent]) -> list[dict[str, Any]]:
    """For each model activity in the history: the attempt it succeeded or failed on, and the
    last failure Temporal recorded before that attempt (type, message, next_retry_delay)."""
    scheduled = {
        e.event_id for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "towline.model_request"
    }
    found: list[dict[str, Any]] = []
    for e in events:
        if not e.HasField("activity_task_started_event_attributes"):
            continue
        attrs = e.activity_task_started_event_attributes
        if attrs.scheduled_event_id not in scheduled:
            continue
        failure = attrs.last_failure
        info = failure.application_failure_info
        found.append({
            "attempt": attrs.attempt,
            "last_failure_type": info.type if failure.message else None,
            "last_failure": failure.message or None,
            "next_retry_delay": (info.next_retry_delay.ToTimedelta()
                                 if info.HasField("next_retry_delay") else None),
            "timeout_type": (failure.timeout_failure_info.timeout_type
                             if failure.HasField("timeout_failure_info") else None),
        })
    return found


async def history_text(handle: WorkflowHandle[Any, Any]) -> str:
    """The whole history as text, every payload decoded (what a key search must not find)."""
    history = await handle.fetch_history()
    parts: list[str] = []
    for event in history.events:
        parts.append(json.dumps(MessageToDict(event)))
    # payload data is base64 in the JSON dump: decode every payload's data too
    for event in history.events:
        _payloads(event, parts)
    return "\n".join(parts)


def _payloads(message: Any, out: list[str]) -> None:
    from temporalio.api.common.v1 import Payload

    if isinstance(message, Payload):
        out.append(message.data.decode(errors="replace"))
        return
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            for item in value.values():
                if hasattr(item, "ListFields"):
                    _payloads(item, out)
        elif hasattr(value, "ListFields"):
            _payloads(value, out)
        else:  # a repeated message field
            for item in value:
                _payloads(item, out)
