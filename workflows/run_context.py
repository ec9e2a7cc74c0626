"""The run's context (`RunInput.context`), checked when the run starts.

A context key is either initial state (a key some capability declares in `state_schema`) or
a field of the agent's `context_type`, a pydantic model: the rest of the context is
validated against it, and the run's tools, hooks and dynamic instructions get the instance.
A key that is neither, or a field the model refuses, ends the run with `InvalidRunInput` naming it, before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from towline.agent import Agent
from towline.errors import InvalidRunInput

from .run_input import describe_errors

__all__ = ["check_context"]


def _names(model: type[BaseModel]) -> set[str]:
    """The keys a context model takes: its fields' names and aliases."""
    names: set[str] = set()
    for name, info in model.model_fields.items():
        names.add(name)
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
    return names


def check_context(agent: Agent, context: Mapping[str, Any] | None) -> Any:
    """The typed context of a run of `agent` given `context` (None without a `context_type`);
    `InvalidRunInput` naming the keys that are wrong. The keys a capability declares in
    `state_schema` are the run's initial state (`AgentRun` takes them), not context."""
    given = dict(context or {})
    rest = {k: v for k, v in given.items() if k not in agent.state_schema}
    model = agent.context_type
    declared = sorted(agent.state_schema)
    if model is None:
        if rest:
            keys = ", ".join(repr(k) for k in sorted(rest))
            state_keys = f" (its state keys: {', '.join(declared)})" if declared else ""
            raise InvalidRunInput(
                f"context key{'s' if len(rest) > 1 else ''} {keys} unknown: agent "
                f"{agent.name!r} declares no context_type and no capability declares "
                f"{'them' if len(rest) > 1 else 'it'} in state_schema{state_keys}; give the "
                "agent a context_type (a pydantic model) to pass a typed context to its tools")
        return None
    unknown = sorted(set(rest) - _names(model))
    if unknown:
        keys = ", ".join(repr(k) for k in unknown)
        raise InvalidRunInput(
            f"context key{'s' if len(unknown) > 1 else ''} {keys} unknown: agent "
            f"{agent.name!r} takes {model.__name__} ({', '.join(sorted(model.model_fields))})"
            + (f" and the state keys {', '.join(declared)}" if declared else ""))
    try:
        typed = model.model_validate(rest)
    except ValidationError as e:
        raise InvalidRunInput(f"the context is not a valid {model.__name__}: "
                              f"{describe_errors(e, sorted(model.model_fields))}") from None
    return typed
