"""Which models a run may be switched to by its input (`RunInput.model`).

A client may ask for another model for one run (`towline run ... --model
anthropic:claude-sonnet-4-5`). Models cost money and reach other services, so
the worker decides: the agent's own model and every model registered with the
worker (`TowlinePlugin(models=...)`, agents' `Model` objects) are always
allowed; any other name must match one of the worker's `allowed_models`
patterns (`fnmatch` style: `"openai:*"`, `"anthropic:claude-*"`, `"*"`).

The workflow reads this per task queue, like the agents it runs; workers of
one task queue must be configured alike. Pure code: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from towline.agent import Agent

__all__ = ["ModelAccess", "register_model_access", "model_allowed"]


@dataclass(frozen=True)
class ModelAccess:
    """The models a worker lets a run's input select."""

    names: frozenset[str] = frozenset()
    """Registered model names (always allowed)."""
    patterns: tuple[str, ...] = ()
    """`fnmatch` patterns of further allowed names (provider strings, say)."""

    def allows(self, model: str) -> bool:
        """Whether `model` is registered or matches a pattern."""
        return model in self.names or any(fnmatchcase(model, p) for p in self.patterns)

    def merged(self, other: ModelAccess) -> ModelAccess:
        """Both sets of names and patterns."""
        return ModelAccess(self.names | other.names, tuple(dict.fromkeys((*self.patterns, *other.patterns))))


_GLOBAL: list[ModelAccess] = [ModelAccess()]
_BY_QUEUE: dict[str, ModelAccess] = {}


def register_model_access(
    names: Iterable[str], patterns: Iterable[str], task_queue: str | None = None
) -> None:
    """Record what a worker (on `task_queue`, or any) allows."""
    access = ModelAccess(frozenset(names), tuple(patterns))
    if task_queue is None:
        _GLOBAL[0] = _GLOBAL[0].merged(access)
    else:
        _BY_QUEUE[task_queue] = _BY_QUEUE.get(task_queue, ModelAccess()).merged(access)


def model_allowed(model: str, agent: Agent, task_queue: str | None) -> bool:
    """Whether a run of `agent` on `task_queue` may be switched to `model`."""
    if model == agent.model_name:
        return True
    access = _BY_QUEUE.get(task_queue or "")
    if access is None:
        access = _GLOBAL[0]
    return access.allows(model)
