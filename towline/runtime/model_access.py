"""Which models a run may be switched to by its input (`RunInput.model`).

A client may ask for another model for one run (`towline run ... --model
anthropic:claude-sonnet-4-5`). Models cost money and reach other services, so
the worker decides: the agent's own model and every model registered with the
worker (`TowlinePlugin(models=...)`, agents' `Model` objects) are always
allowed; any other name must match one of the worker's `allowed_models`
patterns (`fnmatch` style: `"openai:*"`, `"anthropic:claude-*"`, `"*"`).

Each worker holds its own (`towline.runtime.registry.WorkerAgents`); workers of one task
queue must be configured alike. Pure code: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["ModelAccess"]


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
