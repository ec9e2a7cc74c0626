"""An agent whose parallel input guardrail and model request are both slow, for the crash test.

`tests/worker_main.py --agents port_crash_agents:AGENTS` serves it in a process the test
SIGKILLs while both requests are in flight. Both models are `FunctionModel`s that note each
attempt under the counting directory (`durable_agents.effects_dir()`): `started/<who>-<run>-<n>`
when attempt n begins, `cancelled/<who>-<run>-<n>` when it is cancelled. First attempts work
far longer than the test waits (the worker dies under them); later ones answer at once (the
guard) or keep working until cancelled or done (the model: `done` after three seconds).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durable_agents import effects_dir
from temporalio import activity
from temporalio.common import RetryPolicy

from towline import Agent, Usage
from towline.capabilities import InputGuardrail
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["AGENTS", "guarded_agent", "GUARD_USAGE", "MODEL_USAGE"]

GUARD_USAGE = Usage(requests=1, input_tokens=7, output_tokens=3)
MODEL_USAGE = Usage(requests=1, input_tokens=100, output_tokens=20)


def _note(folder: str, who: str) -> None:
    info = activity.info()
    path = effects_dir() / folder / f"{who}-{info.workflow_id}-{info.attempt}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def _prompt(messages: list[Message]) -> str:
    return " ".join(p.text for m in messages if isinstance(m, ModelRequest)
                    for p in m.parts if isinstance(p, UserPart))


async def _guard(messages: list[Message], info: ModelInfo) -> str:
    _note("started", "guard")
    await asyncio.sleep(60 if activity.info().attempt == 1 else 0.2)
    said = _prompt(messages).rsplit(":\n", 1)[-1]  # the user's text, after the policy
    return "FAIL\nIt asks for homework." if "homework" in said else "PASS"


async def _model(messages: list[Message], info: ModelInfo) -> str:
    _note("started", "model")
    try:
        await asyncio.sleep(60 if activity.info().attempt == 1 else 3)
    except asyncio.CancelledError:
        _note("cancelled", "model")
        raise
    return "done"


guarded_agent = Agent(
    name="port-crash-guarded",
    model=FunctionModel(_model, model_name="port-crash-model", usage=MODEL_USAGE),
    capabilities=[InputGuardrail(
        model=FunctionModel(_guard, model_name="port-crash-guard", usage=GUARD_USAGE),
        policy="No homework.", name="homework")],
    # a lost worker is noticed after 4 s; at 2 s (heartbeats every 1.6 s) a loaded machine
    # once delayed the new worker's own heartbeats past the timeout
    model_heartbeat_timeout=timedelta(seconds=4),
    model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5),
)

AGENTS = [guarded_agent]
