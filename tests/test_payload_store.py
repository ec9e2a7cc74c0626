"""A payload store: what does not fit in the history goes to a blob store, and runs go on.

Without a store, an oversized tool result is replaced by a note and an oversized
model response or continue-as-new input fails the run (`tests/test_payloads.py`).
With one (`TowlinePlugin(payload_store=...)`, Temporal's external storage), those
payloads are stored and the history holds a reference; small ones stay inline,
readable in the UI. Stores: `file://` (towline's driver), `s3://` against `moto`'s
S3 server and `gs://` against a GCS emulator, both real HTTP servers on loopback.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from store_servers import (
    gcs_names,
    gcs_server,
    make_gcs_bucket,
    make_s3_bucket,
    s3_env,
    s3_keys,
    s3_server,
)
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Worker

from towline import Agent, tool
from towline.client import run, with_towline
from towline.encryption.codec import ENCODING, EncryptionCodec, StaticKeys
from towline.errors import ConfigurationError
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput, RunResult
from towline.runtime.payloads import PAYLOAD_LIMIT
from towline.storage.payload_store import PayloadStore, payload_store
from towline.testing import history_events, run_to_end, towline_worker

pytestmark = pytest.mark.timeout(180)

MB = 1_000_000
REFERENCE = b"temporal.api.sdk.v1.ExternalStorageReference"


@tool
def blob(n: int, fill: str = "b") -> str:
    """Return `n` characters."""
    return fill * n


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)]


def big_result_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    done = _returns(messages)
    if not done:
        return ModelResponse(parts=[ToolCallPart(tool_name="blob", args={"n": 3 * MB, "fill": "s"})])
    return f"{done[0].status}: {len(str(done[0].content))} characters"


big_result = Agent(name="store-big-result", tools=[blob],
                   model=FunctionModel(big_result_script, model_name="store-big-result"))


def _is_reference(payload: Payload) -> bool:
    return payload.metadata.get("messageType") == REFERENCE and len(payload.external_payloads) == 1


def _tool_results(events: list[HistoryEvent]) -> list[Payload]:
    return [e.activity_task_completed_event_attributes.result.payloads[0] for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]


async def _run_big_result(client: Client, url: str) -> tuple[RunResult, list[HistoryEvent]]:
    store = PayloadStore(url)
    try:
        async with towline_worker(client, [big_result], payload_store=store) as (tclient, queue):
            result = await asyncio.wait_for(run(tclient, big_result, "go", task_queue=queue), 120)
            events = await history_events(tclient.get_workflow_handle(result.run_id))
    finally:
        await store.aclose()
    return result, events


def _check_big_result(result: RunResult, events: list[HistoryEvent]) -> None:
    # The tool's 3 MB went to the store and back: the model saw all of it, not a note.
    assert result.output == f"succeeded: {3 * MB} characters"
    model_answer, tool_answer, _final = _tool_results(events)
    assert _is_reference(tool_answer), tool_answer.metadata
    assert tool_answer.external_payloads[0].size_bytes > 3 * MB
    assert tool_answer.ByteSize() < 1024  # the history holds only the reference
    # Small payloads stay inline, readable as JSON in the UI.
    assert model_answer.metadata["encoding"] == b"json/plain"
    inputs = [e.activity_task_scheduled_event_attributes.input.payloads[0] for e in events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert all(p.metadata["encoding"] == b"json/plain" for p in inputs)


async def test_file_store_keeps_an_oversized_tool_result(client: Client, tmp_path: Path) -> None:
    result, events = await _run_big_result(client, f"file://{tmp_path}")
    _check_big_result(result, events)
    stored = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.stat().st_size > 3 * MB for p in stored)


def big_answer_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    return "z" * (3 * MB)


async def test_file_store_keeps_an_oversized_model_response(client: Client, tmp_path: Path) -> None:
    agent = Agent(name="store-big-answer", model=FunctionModel(big_answer_script, model_name="store-big-answer"))
    async with towline_worker(client, [agent], payload_store=f"file://{tmp_path}") as (tclient, queue):
        result = await asyncio.wait_for(run(tclient, agent, "go", task_queue=queue), 120)
        events = await history_events(tclient.get_workflow_handle(result.run_id))
    assert result.output == "z" * (3 * MB)
    assert result.counters.run_step == 1
    [answer] = _tool_results(events)
    assert _is_reference(answer)
    done = events[-1].workflow_execution_completed_event_attributes.result.payloads[0]
    assert _is_reference(done)  # the run's result too


# --- continue-as-new carries the conversation by reference ---------------------------------


def notes_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step <= 6:
        return ModelResponse(parts=[ToolCallPart(tool_name="blob", args={"n": 30_000})])
    return f"saw {len(messages)} messages"


notes = Agent(name="store-notes", tools=[blob], model=FunctionModel(notes_script, model_name="store-notes"))


async def test_continue_as_new_carries_the_conversation_by_reference(
    client: Client, tmp_path: Path
) -> None:
    async with towline_worker(client, [notes], payload_store=f"file://{tmp_path}") as (tclient, queue):
        result, chain = await asyncio.wait_for(run_to_end(
            tclient, RunInput(agent=notes.name, prompt="go", continue_as_new_after_events=20),
            task_queue=queue, id=f"store-notes-{uuid4().hex[:8]}"), 120)
    assert len(chain) >= 4
    assert result.output == "saw 13 messages"  # the last model saw all of them
    assert [len(str(r.content)) for r in _returns(result.messages)] == [30_000] * 6
    starts = [events[0].workflow_execution_started_event_attributes.input.payloads[0]
              for events in chain]
    # Once the conversation passes the threshold (64 KiB: the third 30 kB result), the
    # input continue-as-new carries is a reference, however long the conversation grows.
    assert not _is_reference(starts[0])
    late = starts[-2:]
    assert all(_is_reference(p) and p.ByteSize() < 1024 for p in late), [p.ByteSize() for p in late]
    assert late[-1].external_payloads[0].size_bytes > 150_000


# --- encryption first, then the store -------------------------------------------------------


async def test_encryption_applies_before_the_store(client: Client, tmp_path: Path) -> None:
    codec = EncryptionCodec(StaticKeys({"k1": bytes(range(32))}, current="k1"))
    tclient = with_towline(client, [big_result], encryption=codec, payload_store=f"file://{tmp_path}")
    queue = f"tq-{uuid4().hex[:12]}"
    async with Worker(tclient, task_queue=queue):
        result = await asyncio.wait_for(run(tclient, big_result, "go", task_queue=queue), 120)
    assert result.output == f"succeeded: {3 * MB} characters"
    stored = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert stored
    for path in stored:
        data = path.read_bytes()
        assert b"s" * 64 not in data  # the tool's text is nowhere in the store in clear
        payload = Payload()
        payload.ParseFromString(data)
        assert payload.metadata["encoding"] == ENCODING  # encrypted, then stored


# --- S3 and GCS, through Temporal's contrib drivers, against local servers -------------------


async def test_s3_store_against_a_local_s3_server(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    async with s3_server() as s3:
        for name, value in s3_env(s3.url).items():
            monkeypatch.setenv(name, value)
        await make_s3_bucket("towline-payloads")
        result, events = await _run_big_result(client, "s3://towline-payloads/runs/test")
        keys = await s3_keys("towline-payloads")
    _check_big_result(result, events)
    assert keys and all(k.startswith("runs/test/v0/") for k in keys), keys


async def test_gcs_store_against_a_gcs_emulator(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    async with gcs_server() as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        make_gcs_bucket(gcs.url, "towline-payloads")
        result, events = await _run_big_result(client, "gs://towline-payloads/runs")
        names = gcs_names(gcs.url, "towline-payloads")
    _check_big_result(result, events)
    assert names and all(n.startswith("runs/v0/") for n in names), names


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["ftp://host/x", "s3://", "gs:///prefix", "file://", "payloads"])
def test_a_store_url_is_checked(url: str) -> None:
    with pytest.raises(ConfigurationError, match="payload store"):
        PayloadStore(url)


def test_store_options() -> None:
    assert payload_store(None) is None and payload_store(" none ") is None
    store = payload_store("s3://bucket/a/b/")
    assert store is not None and (store.bucket, store.prefix) == ("bucket", "a/b")
    with pytest.raises(ConfigurationError, match="threshold"):
        PayloadStore("file:///tmp/x", threshold=-1)
    with pytest.raises(ConfigurationError, match="max_payload_size"):
        PayloadStore("file:///tmp/x", threshold=PAYLOAD_LIMIT, max_payload_size=1000)
    relative: Any = PayloadStore("file://.towline/payloads").directory
    assert relative == Path(".towline/payloads")
