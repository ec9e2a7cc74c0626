"""Agents whose hooks keep module-level state, and one whose hook only reads module-level
constants (issue 40): `tests/test_i40_module_state.py` runs them.

`FirstRunPause` is round 4's finding: the module-level list it fills makes the
first run a worker process sees take another path than the later ones, which a fresh worker's
replay of those would not take. `Counting` rebinds a module-level counter (`global`).
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from temporalio import workflow

from towline import Agent, Capability
from towline.models import TestModel

_FIRST: list[str] = []
"""Module-level state: the bug the first agent exists to show (never do this in a hook)."""
_CALLS = 0
"""A module-level counter the second agent's hook rebinds (never do this either)."""
PAUSES_MS: dict[str, int] = {"first": 10, "later": 0}
"""Module-level constants: read by the third agent's hook, never written."""
NAMES = ["i40-module-constants"]


class FirstRunPause(Capability):
    """Waits 10 ms before each model request of the first run this worker process sees."""

    async def before_model_request(self, state: Any) -> Any:
        run = workflow.info().workflow_id
        if not _FIRST:
            _FIRST.append(run)
        if _FIRST[0] == run:
            await workflow.sleep(timedelta(milliseconds=10))
        return state


class Counting(Capability):
    """Counts model requests across every run on the worker, in a module-level counter."""

    def before_model_request(self, state: Any) -> Any:
        global _CALLS
        _CALLS += 1
        return state


@functools.cache
def _pause(kind: str) -> timedelta:
    """A memo of a pure function (functools.cache): the same on every worker."""
    return timedelta(milliseconds=PAUSES_MS[kind])


class ConstantPause(Capability):
    """Waits as the module's constants say: reads module-level state, never writes it."""

    async def before_model_request(self, state: Any) -> Any:
        if NAMES[0].startswith("i40") and PAUSES_MS["first"] > 0:
            await workflow.sleep(_pause("first"))
        return state


stateful = Agent(name="i40-module-state", model=TestModel(), capabilities=[FirstRunPause])
counting = Agent(name="i40-module-counter", model=TestModel(), capabilities=[Counting])
constants = Agent(name="i40-module-constants", model=TestModel(), capabilities=[ConstantPause])
AGENTS = [stateful, counting, constants]
"""What `tests/worker_main.py --agents i40_module_state_agents:AGENTS` serves."""
