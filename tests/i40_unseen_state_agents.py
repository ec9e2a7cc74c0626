"""`tests/i40_module_state_agents.py`'s `FirstRunPause` agent with its module-level state moved
where the guard's module-state check does not look (an attribute of a module-level object: see
"What the guard cannot see" in docs/hook-code.md). The check fails that agent's first run; this
one still wedges a session the way round 4 found, for `tests/test_i40_stuck.py` to list it as
stuck."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

from towline import Agent, Capability
from towline.models import TestModel


class _Seen:
    """Which run this worker process saw first (never keep such state: the bug shown here)."""

    first: str | None = None


_SEEN = _Seen()


class FirstRunPause(Capability):
    """Waits 10 ms before each model request of the first run this worker process sees."""

    async def before_model_request(self, state: Any) -> Any:
        run = workflow.info().workflow_id
        if _SEEN.first is None:
            _SEEN.first = run
        if _SEEN.first == run:
            await workflow.sleep(timedelta(milliseconds=10))
        return state


stateful = Agent(name="i40-unseen-state", model=TestModel(), capabilities=[FirstRunPause])
"""The first run a worker sees records timers; later runs on the same worker do not."""
AGENTS = [stateful]
"""What `tests/worker_main.py --agents i40_unseen_state_agents:AGENTS` serves."""
