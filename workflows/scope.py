"""The running `AgentRun`, found by the code it runs without `workflow.instance()`.

`AgentRun.run` enters its scope first thing (`enter(self)`, and `enter_hooks` with its `HookApi`
part, what hook code acts on); everything the run then awaits
(the turn, the model call, the hooks, the tool calls) runs in its task or in tasks started from
it, and asyncio copies the context into every task it creates (`asyncio.gather`,
`create_task`, `ensure_future`), so `current()` finds the run there. It is a `ContextVar`, not
a global: the workflows a worker runs interleave on one thread, each in tasks of its own.

What Temporal starts itself (signal, update and query handlers) does not run in the `run`
task's context and sees no scope: a handler has its workflow as `self`.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current", "enter", "enter_hooks", "enter_state", "hooks", "state"]

# `object`, not `AgentRun`: this module imports nothing of the workflow it serves (the workflow
# imports it); a reader checks the type it expects (`isinstance`, against a base it owns).
_CURRENT: ContextVar[object | None] = ContextVar("towline_run_scope", default=None)
_STATE: ContextVar[object | None] = ContextVar("towline_run_state", default=None)
_HOOKS: ContextVar[object | None] = ContextVar("towline_run_hooks", default=None)


def enter(run: object) -> None:
    """Make `run` (the `AgentRun`) the running run of the calling task and of the tasks it
    starts from now on."""
    _CURRENT.set(run)


def current() -> object | None:
    """The `AgentRun` whose `run` the calling code runs in, or None outside one."""
    return _CURRENT.get()


def enter_state(state: object) -> None:
    """Make `state` (the run's `Run`, once `AgentRun` has built it) the running run's state, for
    the code that no caller hands it to (a hook's own `call_model`, a child run's routing)."""
    _STATE.set(state)


def state() -> object | None:
    """The running run's `Run`, or None outside one (or before it is built)."""
    return _STATE.get()


def enter_hooks(hooks: object) -> None:
    """Make `hooks` (the running `AgentRun`'s `HookApi` part) what hook code acts on
    (`towline.hook_context()`, `towline.workflows.current_run()`)."""
    _HOOKS.set(hooks)


def hooks() -> object | None:
    """The running run's `HookApi`, or None outside one."""
    return _HOOKS.get()
