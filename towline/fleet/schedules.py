"""Agents on Temporal Schedules: a fire is an ordinary `AgentRun` whose workflow id names the
schedule (Temporal appends the fire's time: `nightly-report-2025-06-01T09:00:00Z`).

The schedule's action starts `AgentRun` with a `RunInput` fixed when the schedule is
created, and with the search attributes `start_run` sets in its start request (the agent,
its version then, status `running`, the Int counters at 0) where the namespace has them
registered. Temporal sets `TemporalScheduledById` on each fire, so `towline runs --schedule
NAME` lists them. The schedule's memo (`towline.schedule`) keeps what the schedule was made
of (agent, prompt, cron or interval as written), which Temporal's description does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from towline.agent import Agent
from towline.errors import ConfigurationError
from towline.fleet.routing import run_priority
from towline.options import Limits
from towline.results import RunInput
from towline.runtime.fingerprint import agent_version
from towline.runtime.registration import registered_search_attributes
from towline.runtime.search_attributes import start_attributes

__all__ = [
    "Overlap",
    "OVERLAPS",
    "MEMO_KEY",
    "parse_every",
    "create_schedule",
    "ScheduleRow",
    "list_schedules",
    "describe_schedule",
]

Overlap = Literal["skip", "buffer", "allow"]
"""What a fire does while the previous fire's run is still going: `skip` it, `buffer` one
(it starts when the running one ends), or `allow` runs side by side."""

OVERLAPS: Mapping[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow": ScheduleOverlapPolicy.ALLOW_ALL,
}
"""`Overlap` as Temporal's overlap policy."""

MEMO_KEY = "towline.schedule"
"""The schedule memo key holding what it was made of (agent, prompt, when, task queue)."""

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_EVERY = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_every(text: str) -> timedelta:
    """A duration like `30s`, `5m`, `1h30m`, `2d` (units ms, s, m, h, d); `ConfigurationError`
    if it is not one, or not positive."""
    compact = text.strip().replace(" ", "")
    parts = _EVERY.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ConfigurationError(f"{text!r} is not a duration (e.g. 30s, 5m, 1h30m, 2d)")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds < 1:
        raise ConfigurationError(f"{text!r} is shorter than a second: a schedule fires at most "
                                 "once a second")
    return timedelta(seconds=seconds)


def _spec(cron: str | None, every: str | timedelta | None) -> tuple[ScheduleSpec, str]:
    """Temporal's spec, and how it reads (`cron 0 9 * * *`, `every 1h`)."""
    if (cron is None) == (every is None):
        raise ConfigurationError("a schedule fires by a cron expression or every so often: "
                                 "give one of cron and every")
    if cron is not None:
        if not cron.strip():
            raise ConfigurationError("the cron expression is empty")
        return ScheduleSpec(cron_expressions=[cron.strip()]), f"cron {cron.strip()}"
    assert every is not None
    interval = every if isinstance(every, timedelta) else parse_every(every)
    if interval < timedelta(seconds=1):
        raise ConfigurationError("a schedule fires at most once a second")
    text = every if isinstance(every, str) else f"{interval.total_seconds():g}s"
    return ScheduleSpec(intervals=[ScheduleIntervalSpec(every=interval)]), f"every {text.strip()}"


async def _attributes(client: Client, name: str, version: str | None) -> TypedSearchAttributes | None:
    """`start_run`'s start attributes, only those the namespace has (None if it lists none)."""
    wanted = start_attributes(name, version)
    try:
        registered = await registered_search_attributes(client)
    except RPCError:  # may not list them (permissions): try them all, as `start_run` does
        return wanted
    given: list[SearchAttributePair[Any]] = list(wanted)
    pairs = [p for p in given if p.key.name in registered]
    return TypedSearchAttributes(pairs) if pairs else None


async def create_schedule(
    client: Client,
    name: str,
    agent: str | Agent,
    prompt: str,
    *,
    cron: str | None = None,
    every: str | timedelta | None = None,
    overlap: Overlap = "skip",
    task_queue: str = "towline",
    max_steps: int | None = None,
    limits: Limits | None = None,
    model: str | None = None,
    priority: int | None = None,
    tenant: str | None = None,
    paused: bool = False,
    note: str | None = None,
) -> ScheduleHandle:
    """Run `agent` on `prompt` on a Temporal Schedule named `name`; its handle.

    Exactly one of `cron` (a cron expression, e.g. `"0 9 * * 1-5"`, UTC) and `every` (a
    `timedelta`, or text like `"30m"`). `overlap`: see `Overlap`. `max_steps` overrides the
    agent's (`limits` overrides all its limits). `priority`/`tenant`/`model` as for
    `start_run`. Raises `ConfigurationError` for bad options, and Temporal's
    `ScheduleAlreadyRunningError` if a schedule of that name exists.
    """
    if overlap not in OVERLAPS:
        raise ConfigurationError(f"overlap is one of {', '.join(OVERLAPS)}, not {overlap!r}")
    if not name.strip():
        raise ConfigurationError("a schedule needs a name")
    spec, when = _spec(cron, every)
    agent_name = agent.name if isinstance(agent, Agent) else agent
    if max_steps is not None:
        base = limits or (agent.limits if isinstance(agent, Agent) else Limits())
        limits = Limits.model_validate({**base.model_dump(), "max_steps": max_steps})
    inp = RunInput(agent=agent_name, prompt=prompt, limits=limits, model=model,
                   priority=priority, tenant=tenant)
    version = agent_version(agent) if isinstance(agent, Agent) else None
    attributes = await _attributes(client, agent_name, version)

    def schedule(attrs: TypedSearchAttributes | None) -> Schedule:
        action = ScheduleActionStartWorkflow(
            "AgentRun", inp, id=name, task_queue=task_queue,
            typed_search_attributes=attrs or TypedSearchAttributes.empty,
            static_summary=f"{agent_name} ({name}): {prompt[:60]}",
            priority=run_priority(priority, tenant),
        )
        return Schedule(action=action, spec=spec, policy=SchedulePolicy(overlap=OVERLAPS[overlap]),
                        state=ScheduleState(paused=paused, note=note))

    memo = {MEMO_KEY: {"agent": agent_name, "prompt": prompt, "when": when, "overlap": overlap,
                       "task_queue": task_queue}}
    try:
        return await client.create_schedule(name, schedule(attributes), memo=memo)
    except RPCError as e:
        unregistered = (e.status == RPCStatusCode.INVALID_ARGUMENT
                        and "search attribute" in e.message.lower())
        if attributes is None or not unregistered:
            raise
    return await client.create_schedule(name, schedule(None), memo=memo)


@dataclass(frozen=True)
class ScheduleRow:
    """One towline schedule, as `towline schedule list` and `describe` show it."""

    name: str
    agent: str | None
    when: str | None
    """How it fires, as written (`cron 0 9 * * *`, `every 1h`)."""
    paused: bool
    next_fires: list[datetime] = field(default_factory=list[datetime])
    recent_fires: list[tuple[datetime, str]] = field(default_factory=list[tuple[datetime, str]])
    """(time, workflow id) of the latest fires, oldest first."""
    prompt: str | None = None
    overlap: str | None = None
    task_queue: str | None = None
    note: str | None = None
    fires: int | None = None
    """Fires so far (describe only)."""
    running: list[str] = field(default_factory=list[str])
    """Workflow ids of fires still running (describe only)."""

    def to_json(self) -> dict[str, Any]:
        """The row as JSON (times in ISO 8601)."""
        return {
            "name": self.name, "agent": self.agent, "when": self.when, "paused": self.paused,
            "prompt": self.prompt, "overlap": self.overlap, "task_queue": self.task_queue,
            "note": self.note, "fires": self.fires, "running": self.running,
            "next_fires": [t.isoformat() for t in self.next_fires],
            "recent_fires": [{"at": t.isoformat(), "workflow_id": w} for t, w in self.recent_fires],
        }


def _made_of(memo: Mapping[str, Any]) -> dict[str, Any]:
    found: Any = memo.get(MEMO_KEY)
    return dict(found) if isinstance(found, dict) else {}  # pyright: ignore[reportUnknownArgumentType]


async def list_schedules(client: Client) -> list[ScheduleRow]:
    """The namespace's schedules that start `AgentRun`, by name."""
    rows: list[ScheduleRow] = []
    async for item in await client.list_schedules():
        action = item.schedule.action if item.schedule else None
        if getattr(action, "workflow", None) != "AgentRun":
            continue
        made = _made_of(await item.memo())
        info = item.info
        rows.append(ScheduleRow(
            name=item.id, agent=made.get("agent"), when=made.get("when"),
            paused=bool(item.schedule and item.schedule.state.paused),
            next_fires=list(info.next_action_times[:1]) if info else [],
            recent_fires=[(a.started_at, getattr(a.action, "workflow_id", ""))
                          for a in info.recent_actions] if info else [],
            prompt=made.get("prompt"), overlap=made.get("overlap"),
            task_queue=made.get("task_queue"),
            note=item.schedule.state.note if item.schedule else None,
        ))
    return sorted(rows, key=lambda r: r.name)


async def describe_schedule(client: Client, name: str) -> ScheduleRow:
    """One schedule in full (raises `RPCError` NOT_FOUND when there is none of that name)."""
    desc = await client.get_schedule_handle(name).describe()
    made = _made_of(await desc.memo())
    action = desc.schedule.action
    task_queue = action.task_queue if isinstance(action, ScheduleActionStartWorkflow) else None
    info = desc.info
    return ScheduleRow(
        name=name, agent=made.get("agent"), when=made.get("when"),
        paused=desc.schedule.state.paused, next_fires=list(info.next_action_times[:3]),
        recent_fires=[(a.started_at, getattr(a.action, "workflow_id", ""))
                      for a in info.recent_actions],
        prompt=made.get("prompt"), overlap=made.get("overlap") or desc.schedule.policy.overlap.name.lower(),
        task_queue=made.get("task_queue") or task_queue, note=desc.schedule.state.note,
        fires=info.num_actions,
        running=[getattr(r, "workflow_id", "") for r in info.running_actions],
    )
