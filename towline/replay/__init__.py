"""Replaying recorded runs against today's code: the check before a deploy.

`replay_histories(histories, agents)` replays each history with a Temporal
`Replayer` running `AgentRun` for the given agents, and says per run whether today's
code takes exactly the recorded path. A run started with another version of its
agent (`towline.runtime.fingerprint`) is replayed as a worker that accepts that version
would (`towline worker --accept-version V`) — whether that is safe is the question —
and its outcome names both versions. `replay_runs(client, agents, ...)`
fetches the histories from the server first (every execution of each matching
run); `load_history(path)` reads the JSON of `temporal workflow show --output json`.

Besides Temporal's own command check, each replayed model request is compared with
the recorded one (`towline.replay.requests`): its model, who asked for it (the run or
a hook, by the activity summary) and a digest of its input. Model calls are all one
activity type, so a reorder of model-calling capabilities is only caught there.

`towline replay` (the CLI) and `towline.testing` use these.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.runtime import Runtime
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from towline.agent import Agent
from towline.encryption.codec import EncryptionCodec
from towline.replay.records import started_input
from towline.replay.requests import RequestJournal, first_mismatch, recorded_requests
from towline.runtime import search_attributes as attribute
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import counters_from_history
from towline.runtime.plugin import TowlinePlugin
from towline.storage.payload_store import PayloadStore
from towline.workflows import AgentRun

__all__ = ["ReplayOutcome", "replay_histories", "replay_runs", "load_history", "runs_query"]


@dataclass(frozen=True)
class ReplayOutcome:
    """How one recorded workflow execution replayed against today's code."""

    workflow_id: str
    run_id: str
    agent: str | None
    """The agent the run names (None if its input could not be read)."""
    recorded_version: str | None
    """The agent version the run started with (None: recorded before versions)."""
    local_version: str | None
    """Today's version of that agent (None: no agent of that name was given)."""
    failure: str | None
    """Why it did not replay (None: it replays exactly)."""
    nondeterministic: bool = False
    """The failure is a nondeterminism error: today's code emits other commands."""

    @property
    def ok(self) -> bool:
        """Whether today's code replays the run exactly."""
        return self.failure is None

    @property
    def version_changed(self) -> bool:
        """Whether the run started with another version of its agent than today's."""
        return None not in (self.recorded_version, self.local_version) and (
            self.recorded_version != self.local_version)

    def line(self) -> str:
        """One line for `towline replay`."""
        run = f"{self.workflow_id} ({self.run_id})"
        if not self.ok:
            kind = "nondeterminism" if self.nondeterministic else "failed"
            return f"FAILED  {run}  {kind}: {' '.join((self.failure or '').split())}"
        if self.version_changed:
            return (f"ok      {run}  agent {self.agent} version {self.recorded_version} -> "
                    f"{self.local_version}: compatible (workers accept it with "
                    f"--accept-version {self.recorded_version})")
        version = f" version {self.local_version}" if self.local_version else ""
        return f"ok      {run}  agent {self.agent}{version}"

    def to_json(self) -> dict[str, Any]:
        """The JSON form of `towline replay --json`."""
        return {
            "workflow_id": self.workflow_id, "run_id": self.run_id, "agent": self.agent,
            "recorded_version": self.recorded_version, "local_version": self.local_version,
            "ok": self.ok, "nondeterministic": self.nondeterministic, "failure": self.failure,
        }


def _replayer(
    agents: Sequence[Agent], encryption: EncryptionCodec | None, accept: Iterable[str],
    runtime: Runtime | None, journal: RequestJournal, store: PayloadStore | str | None,
) -> Replayer:
    plugin = TowlinePlugin(agents, encryption=encryption, accept_versions=sorted(accept),
                           payload_store=store)
    return Replayer(workflows=[AgentRun], plugins=[plugin], runtime=runtime,
                    interceptors=[journal])


async def _agent_named(history: WorkflowHistory, converter: DataConverter) -> str | None:
    """The agent name in the run's input (its first event)."""
    name = (await started_input(converter, history.events[0])).get("agent") \
        if history.events else None
    return name if isinstance(name, str) else None


async def _aiter(
    histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory],
) -> AsyncIterator[WorkflowHistory]:
    if isinstance(histories, AsyncIterator):
        async for history in histories:
            yield history
    else:
        for history in histories:
            yield history


def _recorded_version(events: Iterable[HistoryEvent]) -> str | None:
    for counters in counters_from_history(events):
        if counters.agent_version:
            return counters.agent_version
    return None


async def replay_histories(
    histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory],
    agents: Sequence[Agent],
    *,
    encryption: EncryptionCodec | None = None,
    runtime: Runtime | None = None,
    payload_store: PayloadStore | str | None = None,
) -> list[ReplayOutcome]:
    """Replay each history against `agents` (and today's `AgentRun`); one outcome each.

    Histories of encrypted runs need the `encryption` codec that wrote them, and runs
    whose large payloads went to a store need that `payload_store`; `runtime` is the
    Temporal runtime to replay in (the CLI's logs nothing).
    """
    listed = [h async for h in _aiter(histories)]
    recorded = {_recorded_version(h.events) for h in listed} - {None}
    journal = RequestJournal()
    replayer = _replayer(agents, encryption, (v for v in recorded if v is not None), runtime,
                         journal, payload_store)
    converter = replayer.config(active_config=True).get("data_converter") or DataConverter.default
    local = {a.name: agent_version(a) for agent in agents for a in agent.all_agents()}
    outcomes: list[ReplayOutcome] = []
    async with replayer.workflow_replay_iterator(_aiter(listed)) as results:
        async for result in results:
            history = result.history
            agent = await _agent_named(history, converter)
            failure = result.replay_failure
            replayed = journal.take(history.workflow_id)
            text = None if failure is None else f"{type(failure).__name__}: {failure}"
            mismatch = None
            if failure is None:  # Temporal's commands agree: do the model requests?
                mismatch = first_mismatch(
                    await recorded_requests(history.events, converter), replayed)
                text = None if mismatch is None else f"NondeterminismError: {mismatch}"
            run_id = history.events[0].workflow_execution_started_event_attributes \
                .original_execution_run_id if history.events else ""
            outcomes.append(ReplayOutcome(
                workflow_id=history.workflow_id, run_id=run_id, agent=agent,
                recorded_version=_recorded_version(history.events),
                local_version=local.get(agent) if agent else None,
                failure=text,
                nondeterministic=isinstance(failure, NondeterminismError) or mismatch is not None,
            ))
    return outcomes


def runs_query(agents: Sequence[Agent], query: str | None = None) -> str:
    """The list filter of the runs of `agents` (and their sub-agents), narrowed by `query`."""
    names = sorted({a.name for agent in agents for a in agent.all_agents()})
    quoted = ", ".join(json.dumps(n) for n in names)
    parts = ['WorkflowType = "AgentRun"', f"{attribute.AGENT.name} IN ({quoted})"]
    if query and query.strip():
        parts.append(f"({query})")
    return " AND ".join(parts)


async def replay_runs(
    client: Client,
    agents: Sequence[Agent],
    *,
    query: str | None = None,
    limit: int | None = 100,
    encryption: EncryptionCodec | None = None,
    runtime: Runtime | None = None,
) -> list[ReplayOutcome]:
    """Fetch the histories of the runs of `agents` from the server and replay them.

    Every execution is replayed (a run that continued-as-new has several), newest
    first, at most `limit` of them; `query` (a Temporal list filter) narrows them.
    """
    listed = client.list_workflows(runs_query(agents, query), limit=limit)
    return await replay_histories(listed.map_histories(), agents, encryption=encryption,
                                  runtime=runtime)


def load_history(path: Path) -> WorkflowHistory:
    """A history exported as JSON (`temporal workflow show --output json`, or the UI's
    download); the workflow id comes from its first event, else the file name."""
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    workflow_id: Any = None
    try:
        workflow_id = data["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"]
    except (KeyError, IndexError, TypeError):
        pass
    return WorkflowHistory.from_json(str(workflow_id or path.name.split(".")[0]), data)
