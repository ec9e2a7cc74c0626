"""A payload-store reference the worker cannot read never leaves a run stuck.

Each case used to fail the workflow task (the SDK resolves references while it decodes an
activation, before towline code runs) and Temporal retried it forever. Now a start input
that cannot be read ends the run `InvalidRunInput` naming why; an update or signal whose
payload cannot be read is refused (dropped), and the session goes on; a reference that
can never be valid is never retried.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import task_failures, until_state
from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.converter import JSONProtoPayloadConverter

from towline import Agent
from towline.client import run_error, with_towline
from towline.storage.payload_store import PayloadStore
from towline.testing import towline_worker

agent = Agent(name="unreadable", model="test")
PROMPT = "x" * 200  # over the stores' threshold below: the input is stored


def _store(path: Path, missing_after: float = 0) -> PayloadStore:
    """A store whose missing payloads are missing for good at once (default: after 60 s)."""
    return PayloadStore(f"file://{path}", threshold=100, missing_after=missing_after)


async def _failed_start(handle: WorkflowHandle[Any, Any]) -> str:
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), 30)
    error = run_error(failure.value)
    assert error.reason == "InvalidRunInput", error
    assert await task_failures(handle) == []  # ended at the first try, never retried
    return error.message


def reference(key: str, driver: str = "towline.file", sha256: str = "0" * 64,
              extra: Mapping[str, str] | None = None) -> Payload:
    """A payload-store reference as a third party could write it into a history (`extra`:
    more claim fields, overriding these)."""
    claim = {"key": key, "sha256": sha256, **(extra or {})}
    payload = JSONProtoPayloadConverter().to_payload(
        ExternalStorageReference(driver_name=driver, claim_data=claim))
    assert payload is not None
    return payload


async def test_a_start_input_in_another_store_ends_the_run(client: Client, tmp_path: Path) -> None:
    theirs = with_towline(client, [agent], payload_store=_store(tmp_path / "theirs"))
    async with towline_worker(client, [agent], payload_store=_store(tmp_path / "ours")) as (_, q):
        handle = await theirs.start_workflow(
            "AgentRun", {"agent": agent.name, "prompt": PROMPT},
            id=f"elsewhere-{uuid.uuid4().hex[:8]}", task_queue=q)
        message = await _failed_start(handle)
    assert "the input could not be read: stored payload unreadable" in message
    assert str(tmp_path / "ours") in message


async def test_a_start_input_stored_for_a_worker_without_a_store_ends_the_run(
    client: Client, tmp_path: Path
) -> None:
    theirs = with_towline(client, [agent], payload_store=_store(tmp_path / "theirs"))
    async with towline_worker(client, [agent]) as (_, queue):
        handle = await theirs.start_workflow(
            "AgentRun", {"agent": agent.name, "prompt": PROMPT},
            id=f"no-store-{uuid.uuid4().hex[:8]}", task_queue=queue)
        message = await _failed_start(handle)
    assert "it is in a payload store, and this worker has none" in message


@pytest.mark.parametrize(("key", "driver", "says"), [
    ("../../etc/passwd", "towline.file", "invalid file store reference"),
    ("/etc/passwd", "towline.file", "invalid file store reference"),
    ("ab/" + "0" * 64, "someone.s3", "which this worker does not have"),
])
async def test_a_reference_that_can_never_be_read_is_never_retried(
    client: Client, tmp_path: Path, key: str, driver: str, says: str
) -> None:
    async with towline_worker(client, [agent], payload_store=_store(tmp_path)) as (tc, queue):
        wid = f"forged-{uuid.uuid4().hex[:8]}"
        await client.start_workflow(  # a plain client: any payload
            "AgentRun", RawValue(reference(key, driver)), id=wid, task_queue=queue)
        message = await _failed_start(tc.get_workflow_handle(wid))
    assert says in message, message


async def test_an_update_or_signal_that_cannot_be_read_leaves_the_session_going(
    client: Client, tmp_path: Path
) -> None:
    async with towline_worker(client, [agent], payload_store=_store(tmp_path)) as (tc, queue):
        session = await tc.start_workflow(
            "AgentRun", {"agent": agent.name, "prompt": "hi", "session": True},
            id=f"session-{uuid.uuid4().hex[:8]}", task_queue=queue)
        await until_state(session, "waiting")
        third_party = client.get_workflow_handle(session.id)
        missing = hashlib.sha256(b"never stored").hexdigest()
        for key in ("../escape", f"{missing[:2]}/{missing}"):
            with pytest.raises(WorkflowUpdateFailedError):
                await asyncio.wait_for(
                    third_party.execute_update("send", RawValue(reference(key))), 30)
            await third_party.signal("cancel", RawValue(reference(key)))
        # the session goes on: the cancels were dropped, a good message is answered
        answer = await asyncio.wait_for(session.execute_update("send", {"content": "again"}), 30)
        assert answer is not None
        await session.signal("end")
        result = await asyncio.wait_for(session.result(), 30)
        assert result["counters"]["run_step"] >= 2
        assert await task_failures(session) == []


@pytest.mark.parametrize("outage", ["directory away", "payload away"])
async def test_a_store_out_of_reach_is_retried_until_it_is_back(
    client: Client, tmp_path: Path, outage: str
) -> None:
    """Not every failure is final: a store that is away (its directory, or a payload not
    there yet, within `missing_after`) comes back, and the run goes on."""
    store, away = tmp_path / "store", tmp_path / "away"
    starter = with_towline(client, [agent], payload_store=_store(store))
    queue = f"tq-away-{uuid.uuid4().hex[:8]}"
    handle = await starter.start_workflow(
        "AgentRun", {"agent": agent.name, "prompt": PROMPT},
        id=f"away-{uuid.uuid4().hex[:8]}", task_queue=queue)
    [stored] = [p for p in store.rglob("*") if p.is_file()]
    if outage == "directory away":
        store.rename(away)  # before any worker reads the input
        store.symlink_to(tmp_path / "nowhere")  # a mount point with nothing behind it
    else:
        stored.rename(away)
    async with towline_worker(client, [agent], task_queue=queue,
                              payload_store=_store(store, missing_after=60)):
        for _ in range(100):  # the worker tries, and fails the task: the store is away
            if await task_failures(handle):
                break
            await asyncio.sleep(0.1)
        if outage == "directory away":
            store.unlink()
            away.rename(store)
        else:
            away.rename(stored)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result["output"]
    assert await task_failures(handle)


async def test_a_third_partys_send_of_a_missing_payload_is_refused_at_once(
    client: Client, tmp_path: Path
) -> None:
    """A missing payload may yet appear for a start input (a store being mounted), so that
    waits `missing_after`; a send's or a signal's never will: refused at once, with the reason."""
    store = _store(tmp_path, missing_after=60)
    async with towline_worker(client, [agent], payload_store=store) as (tc, queue):
        session = await tc.start_workflow(
            "AgentRun", {"agent": agent.name, "prompt": "hi", "session": True},
            id=f"session-{uuid.uuid4().hex[:8]}", task_queue=queue)
        await until_state(session, "waiting")
        missing = hashlib.sha256(b"never stored either").hexdigest()
        third_party = client.get_workflow_handle(session.id)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(third_party.execute_update(
                "send", RawValue(reference(f"{missing[:2]}/{missing}", sha256=missing))), 15)
        said = str(refused.value.cause)
        assert "stored payload unreadable" in said and missing[:8] in said, said
        answer = await asyncio.wait_for(session.execute_update("send", {"content": "again"}), 30)
        assert answer is not None
        await session.signal("end")
        await asyncio.wait_for(session.result(), 30)
        assert await task_failures(session) == []
