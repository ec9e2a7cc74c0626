"""What one worker serves: its agents by name, their versions, the models runs may use.

Every `TowlinePlugin` holds one `WorkerAgents` and adds `AgentsInterceptor` to the
workers (and `Replayer`s) it configures; the interceptor hands that worker's
`WorkerAgents` to each `AgentRun` it executes (`worker_agents()`). Nothing is
process-wide, so two workers in one process — or a worker and a `Replayer` — may
serve different agents under the same name without seeing each other's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from towline.agent import Agent
from towline.capabilities.base import Middleware
from towline.runtime.fingerprint import agent_version, describe_capability, is_frozen
from towline.runtime.model_access import ModelAccess

__all__ = ["WorkerAgents", "AgentsInterceptor", "worker_agents"]


@dataclass(frozen=True)
class WorkerAgents:
    """The agents one worker runs, and what it allows."""

    agents: Mapping[str, Agent] = field(default_factory=lambda: MappingProxyType({}))
    """By name (sub-agents included)."""
    access: ModelAccess = field(default_factory=ModelAccess)
    """The models a run's input may switch an agent to."""
    accepted_versions: frozenset[str] = frozenset()
    """Earlier agent versions this worker also replays (checked compatible with `towline replay`)."""
    versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Each agent's version (filled in from `agents`)."""
    watched: Mapping[int, tuple[dict[str, Any], dict[str, Any] | None]] = field(
        default_factory=lambda: MappingProxyType({}))
    """By `id()`, the capabilities whose configuration a hook could change in place (not
    frozen all the way down): their description and attributes as the worker started."""
    identities: dict[str, str] = field(default_factory=dict[str, str])
    """The identity of the worker built with this registry on each task queue (recorded as
    the worker is configured), which the errors of a run it cannot serve name."""

    @classmethod
    def of(
        cls, agents: Iterable[Agent], access: ModelAccess, *, accepted_versions: Iterable[str] = (),
    ) -> WorkerAgents:
        """The registry of `agents` (their versions computed once, here)."""
        by_name = {a.name: a for a in agents}
        return cls(
            agents=MappingProxyType(by_name), access=access,
            accepted_versions=frozenset(accepted_versions),
            versions=MappingProxyType({name: agent_version(a) for name, a in by_name.items()}),
            watched=MappingProxyType(_watched(by_name.values())),
        )

    def agent(self, name: str) -> Agent | None:
        """The agent registered under `name`, if any."""
        return self.agents.get(name)

    def model_allowed(self, model: str, agent: Agent) -> bool:
        """Whether a run of `agent` may be switched to `model`."""
        return model == agent.model_name or self.access.allows(model)

    def described(self, task_queue: str) -> str:
        """This worker as a failure of a run it took names it: its identity, the queue, its
        agents and models (`worker 42@host, which took this run's task from queue 'towline'
        and serves agents calculator (models: their own)`)."""
        identity = self.identities.get(task_queue)
        who = f"worker {identity}" if identity else "the worker"
        agents = ", ".join(sorted(self.agents)) or "none"
        extra = "".join(f", {m}" for m in [*sorted(self.access.names),
                                           *(repr(p) for p in self.access.patterns)])
        return (f"{who}, which took this run's task from queue {task_queue!r} and serves agents "
                f"{agents} (models: their own{extra})")


def _watched(agents: Iterable[Agent]) -> dict[int, tuple[dict[str, Any], dict[str, Any] | None]]:
    """Capability instances a hook could change in place (middleware hooks get no `self`)."""
    found: dict[int, tuple[dict[str, Any], dict[str, Any] | None]] = {}
    for agent in agents:
        for cap in agent.capabilities:
            if isinstance(cap, type | Middleware) or id(cap) in found or is_frozen(cap):
                continue
            try:
                attributes: dict[str, Any] | None = copy.deepcopy(dict(vars(cap)))
            except Exception:  # noqa: BLE001 - uncopyable: changes are caught, not undone
                attributes = None
            found[id(cap)] = (describe_capability(cap), attributes)
    return found


_CURRENT: ContextVar[WorkerAgents | None] = ContextVar("towline_worker_agents", default=None)


def worker_agents() -> WorkerAgents | None:
    """The `WorkerAgents` of the worker executing the calling workflow (None without a plugin)."""
    return _CURRENT.get()


class AgentsInterceptor(Interceptor):
    """Hands a worker's `WorkerAgents` to the workflows it executes."""

    def __init__(self, registry: WorkerAgents) -> None:
        self.registry = registry

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        registry = self.registry

        class _Inbound(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                # The run executes in this coroutine's context (and the tasks it starts copy it).
                _CURRENT.set(registry)
                return await super().execute_workflow(input)

        return _Inbound
