"""Worker-side dependencies and the typed run context, as the activities of one worker see them.

A database pool, an HTTP client, a cache: objects that cannot (and must not) be serialised
into a run's input or history live on the worker. `TowlinePlugin(deps=...)` hands one such
object to every activity its workers run: tool functions read it as `ToolContext.deps`,
dynamic instructions as `InstructionsContext.deps`, and a capability's own activities (or
any other activity on the worker) with `current_deps()`. Nothing of it is ever written to a
payload: it is set, for the duration of each activity, by `WorkerSideInterceptor`, the
activity interceptor the plugin installs, so two workers in one process (or a worker and a
test) each see their own.

The same interceptor carries the worker's agents (its `WorkerAgents` registry's), so a tool's
context is handed over typed (`typed_context`): the workflow sends the run's context as JSON,
the worker validates it again with the agent's `context_type`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

if TYPE_CHECKING:
    from towline.agent import Agent

__all__ = ["WorkerSide", "WorkerSideInterceptor", "current_deps", "typed_context"]


@dataclass(frozen=True)
class WorkerSide:
    """What one plugin's workers hand to the activities they run."""

    deps: Any = None
    """`TowlinePlugin(deps=...)`: the worker-side dependencies (None: none given)."""
    agents: Mapping[str, Agent] = field(default_factory=lambda: MappingProxyType({}))
    """The worker's agents by name (`WorkerAgents.agents`): whose `context_type` types a
    run's context."""


_CURRENT: ContextVar[WorkerSide | None] = ContextVar("towline_worker_side", default=None)


def current_deps() -> Any:
    """The worker-side dependencies (`TowlinePlugin(deps=...)`) of the worker running the
    calling activity: for a capability's own activities, which get no `ToolContext`.

    None outside an activity of a towline worker, or when the plugin was given none. Never
    call it from workflow code (a hook): the workflow must not depend on what one worker holds.
    """
    side = _CURRENT.get()
    return side.deps if side is not None else None


def typed_context(agent: str, raw: Any) -> Any:
    """The run's context (`raw`, its JSON) as `agent`'s `context_type` on this worker, or
    `raw` as it is when the agent declares none (or no towline worker runs the activity)."""
    side = _CURRENT.get()
    found = side.agents.get(agent) if side is not None else None
    model = found.context_type if found is not None else None
    if model is None or raw is None:
        return raw
    return model.model_validate(raw)


class WorkerSideInterceptor(Interceptor):
    """Activity interceptor: makes a plugin's `WorkerSide` current while each activity runs
    (the context is copied into a sync activity's thread, so those see it too)."""

    def __init__(self, side: WorkerSide) -> None:
        self.side = side

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap every activity of the worker."""
        return _Inbound(next, self.side)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, side: WorkerSide) -> None:
        super().__init__(next)
        self._side = side

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        token = _CURRENT.set(self._side)
        try:
            return await super().execute_activity(input)
        finally:
            _CURRENT.reset(token)
