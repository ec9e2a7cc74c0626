"""The hook context: what a capability's hook code may do in the run it is part of.

Inside a hook, a `wrap_model_call` wrapper or an `in_workflow` tool, `hook_context()` returns
the running run's `HookContext`: call a model durably, meter a guard's model request, report
usage, ask a person for a decision on a tool call (or apply an approval policy), wait on
workflow time, publish a live event, hand the run off, run another agent as a child, read the
run (`RunView`) and its typed context, and call user code under the determinism guard. The
built-in capabilities (`towline.capabilities`) use nothing else of the engine, so a capability
written outside towline can do all they do (docs/hook-code.md).

This module is light to import (a capability module may import it at its top, the engine is
loaded on first use): `HookContext`, `RunView` and `ApprovalDecision` live in
`towline.workflows.hook_api` and `towline.workflows.decisions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from towline.workflows.decisions import ApprovalDecision
    from towline.workflows.hook_api import HookContext, RunView

__all__ = ["ApprovalDecision", "HookContext", "RunView", "hook_context"]

_HOMES = {"HookContext": "towline.workflows.hook_api", "RunView": "towline.workflows.hook_api",
          "ApprovalDecision": "towline.workflows.decisions"}


def hook_context() -> HookContext:
    """The running run's `HookContext`, for hook code (workflow code of an `AgentRun`).

    Raises `TypeError` outside a run: in a client, an activity, or a test that calls a hook
    directly (`towline.capabilities.run_before_model_request` and its siblings).
    """
    from towline.workflows.hook_api import hook_context as current

    return current()


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'towline.hooks' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
