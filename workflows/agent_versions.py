"""Which version of an agent a run runs: recorded by a marker, checked on every replay.

A run records its agent's version (`towline.runtime.fingerprint`) with a `workflow.patched`
marker when it starts, and each agent it is handed to (`towline.capabilities.Handoff`) when
the handoff is made. A replay must find this worker's version, or one it accepts, recorded
there; otherwise another definition could take another path through the history, so the
workflow task fails (`AgentVersionMismatch`) and the run waits, losing nothing, for a worker
that has its version.
"""

from __future__ import annotations

from temporalio import workflow

from towline.agent import Agent
from towline.errors import AgentVersionMismatch
from towline.runtime.registry import WorkerAgents

from .versions import version_patch

__all__ = ["recorded_version"]


def recorded_version(worker: WorkerAgents, agent: Agent, how: str = "was started with") -> str:
    """This worker's version of `agent`, or one it accepts, as the run recorded it (a new run
    records this worker's); `how` the run came to `agent`, for the mismatch's message."""
    local = worker.versions[agent.name]
    if workflow.patched(version_patch(local)):
        return local
    for accepted in sorted(worker.accepted_versions):
        if workflow.patched(version_patch(accepted)):
            return accepted
    raise AgentVersionMismatch(
        f"run {workflow.info().workflow_id!r} {how} another version of agent "
        f"{agent.name!r} than this worker's ({local}; the run's version is its "
        "TowlineAgentVersion search attribute). Replaying it with this definition could "
        "take another path, so this workflow task fails and the run waits for a worker "
        "with its version: keep such a worker running (or pin runs to their build with "
        "`towline worker --deployment-name NAME --build-id ID`); if `towline replay` shows "
        "the change is compatible, accept the old version with `towline worker "
        "--accept-version VERSION` (TowlinePlugin(accept_versions=[...]))."
    )
