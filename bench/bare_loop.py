"""The bare loop of `bench/loop.py`: a hand-written temporalio agent loop doing the least work.

Per step, one "model" activity (scripted: it asks for `add(a, b)` until the last
step, then answers) and one `add` activity, exactly the loop towline runs in the
benchmark, with nothing else: no conversation, no counters, no memo, no search
attributes, no summaries. It imports only the standard library and temporalio
(the workflow sandbox re-imports its module for every run, so towline must not
be imported here: that would be a cost the bare loop does not have).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

__all__ = ["BareLoop", "Reply", "bare_model", "bare_add", "BARE_ACTIVITIES", "LATENCY"]

LATENCY = 0.0
"""Seconds each model call sleeps, standing in for a provider (`bench/scale.py` sets it in
the worker process; the activity reads it, outside the sandbox)."""


@dataclass
class Reply:
    """The scripted model's answer: a call of `add`, or the final text."""

    tool: str | None = None
    a: int = 0
    b: int = 0
    text: str | None = None


@activity.defn(name="bare.model")
async def bare_model(step: int, steps: int) -> Reply:
    """Call `add` for the first `steps` steps, then answer (after `LATENCY` seconds)."""
    if LATENCY:
        await asyncio.sleep(LATENCY)
    if step <= steps:
        return Reply(tool="add", a=step, b=step)
    return Reply(text="done")


@activity.defn(name="bare.add")
async def bare_add(a: int, b: int) -> int:
    """The tool."""
    return a + b


BARE_ACTIVITIES = [bare_model, bare_add]


@workflow.defn(name="BareLoop")
class BareLoop:
    """`steps` tool steps, then a final model call: the same activities as towline's run."""

    @workflow.run
    async def run(self, steps: int) -> str:
        step = 1
        while True:
            reply = await workflow.execute_activity(
                bare_model, args=[step, steps], start_to_close_timeout=timedelta(minutes=1)
            )
            if reply.tool is None:
                return reply.text or ""
            await workflow.execute_activity(
                bare_add, args=[reply.a, reply.b], start_to_close_timeout=timedelta(minutes=1)
            )
            step += 1
