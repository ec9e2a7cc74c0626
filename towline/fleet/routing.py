"""Running a fleet: which task queue a model call goes to, and a run's priority and tenant.

Model routes. `ModelRoutes` maps model-name patterns (`fnmatch` style, e.g. `"openai:*"`)
to task queues, optionally with a rate (requests per second) for each queue. The workers
that poll a model queue set Temporal's task-queue-wide activity rate limit
(`Worker(max_task_queue_activities_per_second=...)`), so the *server* dispatches at most
that many model calls per second to all of them together, however many there are.

How a run learns its routes, deterministically: the worker that starts the run reports its
routing table in `WorkerFacts.model_queues` (the `towline.runtime.search_attributes` local activity,
whose marker records the answer in the run's history; continue-as-new carries it). A run
therefore keeps the routes it started with, across replays, crashes and continue-as-new,
whatever the replaying worker's flags say; runs started after a change take the new
routes. Every worker that runs workflows on a task queue should be given the same routes.

Priority and tenant. `RunInput.priority` (1 = first, 5 = last; Temporal's default is 3)
and `RunInput.tenant` become `temporalio.common.Priority(priority_key, fairness_key)` on
the run's start and on every activity and child run it schedules (`Dispatch`).

Pure code apart from the worker-side table of routes by task queue (`register_model_queues`),
read by the local activity; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from types import MappingProxyType

from temporalio.common import Priority

from towline.errors import ConfigurationError
from towline.results import PRIORITY_MAX, PRIORITY_MIN, TENANT_MAX_BYTES

__all__ = [
    "ModelRoute",
    "ModelRoutes",
    "Dispatch",
    "run_priority",
    "model_queue_for",
    "register_model_queues",
    "model_queues_of",
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "TENANT_MAX_BYTES",
]



@dataclass(frozen=True)
class ModelRoute:
    """Model calls whose model name matches `pattern` go to `task_queue`."""

    pattern: str
    """An `fnmatch` pattern of model names: `"openai:*"`, `"anthropic:claude-*"`, an exact name."""
    task_queue: str
    """The task queue those calls are scheduled on (not the run's own queue)."""
    rps: float | None = None
    """Model calls per second the server dispatches from `task_queue`, to all its workers
    together; None: no limit."""

    def __post_init__(self) -> None:
        if not self.pattern.strip():
            raise ConfigurationError("a model route needs a pattern, e.g. 'openai:*'")
        if not self.task_queue.strip():
            raise ConfigurationError(f"model route {self.pattern!r} needs a task queue")
        if self.rps is not None and not (math.isfinite(self.rps) and self.rps > 0):
            raise ConfigurationError(f"the rate of {self.pattern!r} must be a positive number "
                                     f"of requests per second, not {self.rps}")

    def matches(self, model: str) -> bool:
        """Whether a call to `model` takes this route."""
        return fnmatchcase(model, self.pattern)


def _split(spec: str, what: str, example: str) -> tuple[str, str]:
    pattern, sep, value = spec.rpartition("=")
    if not sep or not pattern.strip() or not value.strip():
        raise ConfigurationError(f"{what} {spec!r} is not PATTERN=VALUE (e.g. {example!r})")
    return pattern.strip(), value.strip()


@dataclass(frozen=True)
class ModelRoutes:
    """A worker's model routes: the first route whose pattern matches a model name wins."""

    routes: tuple[ModelRoute, ...] = ()
    """In order of precedence."""

    def __post_init__(self) -> None:
        rates: dict[str, float | None] = {}
        for route in self.routes:
            if route.task_queue in rates and rates[route.task_queue] != route.rps:
                raise ConfigurationError(
                    f"task queue {route.task_queue!r} is given two rates ({rates[route.task_queue]} "
                    f"and {route.rps}): one queue has one rate limit")
            rates[route.task_queue] = route.rps
        patterns = [r.pattern for r in self.routes]
        if len(set(patterns)) != len(patterns):
            raise ConfigurationError(f"a model pattern is routed twice: {patterns}")

    @classmethod
    def parse(cls, queues: Sequence[str] = (), rates: Sequence[str] = ()) -> ModelRoutes:
        """From `--model-queue PATTERN=QUEUE` and `--model-rps PATTERN=N` values (each pattern
        of a rate must be a routed pattern). Raises `ConfigurationError` naming the bad value."""
        routed: dict[str, str] = {}
        for spec in queues:
            pattern, queue = _split(spec, "--model-queue", "openai:*=openai-models")
            if pattern in routed:
                raise ConfigurationError(f"--model-queue routes {pattern!r} twice")
            routed[pattern] = queue
        limits: dict[str, float] = {}
        for spec in rates:
            pattern, value = _split(spec, "--model-rps", "openai:*=5")
            if pattern not in routed:
                raise ConfigurationError(
                    f"--model-rps {spec!r}: no --model-queue routes {pattern!r} (the rate limit "
                    "is the model queue's: route the pattern to a queue first)")
            try:
                limits[pattern] = float(value)
            except ValueError:
                raise ConfigurationError(f"--model-rps {spec!r}: {value!r} is not a number") from None
        return cls(tuple(ModelRoute(p, q, limits.get(p)) for p, q in routed.items()))

    def __bool__(self) -> bool:
        return bool(self.routes)

    def table(self) -> dict[str, str]:
        """Pattern -> task queue, in order: what a run records (`WorkerFacts.model_queues`)."""
        return {r.pattern: r.task_queue for r in self.routes}

    def queues(self) -> dict[str, float | None]:
        """Each model task queue and its rate limit (None: unlimited), in order."""
        return {r.task_queue: r.rps for r in self.routes}


def model_queue_for(table: Mapping[str, str], model: str) -> str | None:
    """The task queue of a call to `model` under `table` (first match), None: the run's own."""
    for pattern, queue in table.items():
        if fnmatchcase(model, pattern):
            return queue
    return None


def run_priority(priority: int | None, tenant: str | None) -> Priority:
    """Temporal's `Priority` for a run's `priority` and `tenant` (`Priority.default`: neither)."""
    if priority is None and not tenant:
        return Priority.default
    return Priority(priority_key=priority, fairness_key=tenant or None)


@dataclass(frozen=True)
class Dispatch:
    """Where and how urgently one run schedules its work (set once, when the run starts)."""

    model_queues: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Pattern -> task queue of model calls (`WorkerFacts.model_queues`)."""
    priority: Priority = Priority.default
    """The run's priority and tenant, for every activity and child run it schedules."""

    @classmethod
    def of(cls, model_queues: Mapping[str, str], priority: int | None, tenant: str | None) -> Dispatch:
        """The dispatch of a run whose worker reported `model_queues`, of this priority and tenant."""
        return cls(MappingProxyType(dict(model_queues)), run_priority(priority, tenant))

    def model_queue(self, model: str) -> str | None:
        """The task queue of a call to `model` (None: the run's own)."""
        return model_queue_for(self.model_queues, model)


_ROUTES_BY_QUEUE: dict[str, dict[str, str]] = {}


def register_model_queues(task_queue: str, table: Mapping[str, str]) -> None:
    """This process's workers of `task_queue` route model calls by `table` (worker side)."""
    if table:
        _ROUTES_BY_QUEUE[task_queue] = dict(table)
    else:
        _ROUTES_BY_QUEUE.pop(task_queue, None)


def model_queues_of(task_queue: str | None) -> dict[str, str]:
    """The routing table of this process's workers of `task_queue` (empty: none), read by the
    `towline.runtime.search_attributes` local activity when a run starts."""
    return dict(_ROUTES_BY_QUEUE.get(task_queue or "", {}))
