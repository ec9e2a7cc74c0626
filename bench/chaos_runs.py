"""The runs of a chaos session (`bench/chaos.py`): their plans, starts and ends, and what
is collected about each once the storm is over.

Every call to the server is retried while it is down (the bench kills it); a start is also
retried while the payload store is out (the run's large input cannot be stored yet).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from chaos_agents import AGENTS, Call, make_plan, plan_prompt, prompt_pad
from chaos_report import RunRecord
from chaos_store import Outage, check_references, references
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from towline.client import run_error, start_run
from towline.results import RunResult
from towline.runtime.ledger import decoded_counters_from_history

__all__ = ["Runs", "collect", "rpc"]

_T = TypeVar("_T")
TASK_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED


async def rpc(call: Callable[[], Awaitable[_T]], patience: float = 60.0) -> _T:
    """`call()`, retried while the server is unreachable (it may be down: the bench kills it)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return await call()
        except RPCError as e:
            transient = e.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
                                     RPCStatusCode.UNKNOWN, RPCStatusCode.CANCELLED,
                                     RPCStatusCode.INTERNAL, RPCStatusCode.RESOURCE_EXHAUSTED)
            if not transient or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


class Runs:
    """The runs of one chaos session: plans, starts, and which are still open."""

    def __init__(self, client: Client, count: int, seed: int, task_queue: str,
                 rng: random.Random) -> None:
        self.client = client
        self.task_queue = task_queue
        names = [a.name for a in AGENTS]
        self.plans: list[tuple[str, str, list[list[Call]]]] = []
        for i in range(count):  # the agents in turn
            agent = names[i % len(names)]
            self.plans.append((f"chaos-{seed}-{i:03d}-{agent}-{task_queue[-6:]}", agent,
                               make_plan(agent, i, rng)))
        self.handles: dict[str, WorkflowHandle[Any, RunResult]] = {}
        self.open: set[str] = set()
        self.all_started = False

    async def start_all(self, interval: float) -> None:
        """Start every run, `interval` seconds apart, through server and store outages."""
        for workflow_id, agent, plan in self.plans:
            async def start(wid: str = workflow_id, name: str = agent,
                            p: list[list[Call]] = plan) -> WorkflowHandle[Any, RunResult]:
                while True:
                    try:
                        return await start_run(
                            self.client, name, plan_prompt(p, prompt_pad(name)),
                            task_queue=self.task_queue, id=wid,
                            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
                    except WorkflowAlreadyStartedError:  # a retried start that had gone through
                        return self.client.get_workflow_handle(wid, result_type=RunResult)
                    except OSError:  # the store is out: its large input cannot be stored yet
                        await asyncio.sleep(0.5)

            self.handles[workflow_id] = await rpc(start)
            self.open.add(workflow_id)
            await asyncio.sleep(interval)
        self.all_started = True

    async def poll(self) -> None:
        """Forget runs that have closed (checked every second, forever)."""
        while True:
            for workflow_id in list(self.open):
                try:
                    desc = await self.handles[workflow_id].describe()
                except (RPCError, RuntimeError):
                    break  # the server is down: try again later
                if desc.status != WorkflowExecutionStatus.RUNNING:
                    self.open.discard(workflow_id)
            await asyncio.sleep(1.0)

    @property
    def done(self) -> bool:
        return self.all_started and not self.open


async def collect(runs: Runs, out: Path, store: Outage | None,
                   lost: list[str]) -> list[RunRecord]:
    """Each run's status, result or failure and ledger snapshots; stuck runs are terminated.

    Every run's history is saved as `out/histories/<workflow id>.json` (Temporal's JSON
    history format, which `WorkflowHistory.from_json` and the `Replayer` read). Its store
    references are checked against the store; what is wrong goes to `lost`.
    """
    records: list[RunRecord] = []
    histories = out / "histories"
    histories.mkdir(exist_ok=True)
    for workflow_id, agent, plan in runs.plans:
        handle = runs.handles.get(workflow_id)
        if handle is None:
            records.append(RunRecord(workflow_id, agent, plan, "NOT_STARTED"))
            continue
        desc = await rpc(handle.describe)
        status = desc.status.name if desc.status is not None else "UNKNOWN"
        history = await rpc(handle.fetch_history)
        claims = references(history.events)
        record = RunRecord(workflow_id, agent, plan, status,
                           snapshots=await decoded_counters_from_history(
                               history.events, runs.client.data_converter),
                           stored=len(claims),
                           task_failures=sum(e.event_type == TASK_FAILED for e in history.events))
        if store is not None:
            lost += [f"{workflow_id}: {wrong}" for wrong in check_references(claims, store.payloads)]
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            record.result = await rpc(handle.result)
        elif desc.status == WorkflowExecutionStatus.FAILED:
            try:
                await rpc(handle.result)
            except WorkflowFailureError as e:
                error = run_error(e)
                record.reason, record.message, record.partial = error.reason, str(error), error.partial
        (histories / f"{workflow_id}.json").write_text(history.to_json())
        if desc.status == WorkflowExecutionStatus.RUNNING:
            await rpc(lambda h=handle: h.terminate("chaos bench: stuck after the drain"))
        records.append(record)
    return records
