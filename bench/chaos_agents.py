"""Agents, tools and plans of the chaos bench (`bench/chaos.py`), importable by its workers.

Every run follows a *plan* that the bench writes into its prompt as JSON: a list of steps,
each a list of tool calls. The agents' models are deterministic functions that replay the
plan (step k's calls at request k, then a final answer quoting every return), so the bench
knows exactly which ledger each run must end with, whatever crashes happened on the way.

Tools count what they do in files under the folder named by `CHAOS_EFFECTS`, one JSON line
per event, keyed by the call's idempotency key (stable across attempts):

- `exec.log`: every entry into a tool function (tool, key, label, workflow and activity
  id, attempt, pid, time);
- `effects.log`: every effect of a non-idempotent tool. It applies its effect on every
  execution (as a payment or an e-mail would), so a duplicate shows up as two lines for one
  key;
- `marks/`: every effect of an idempotent tool, one file per key holding its record. The
  file is the effect and its own once-per-key guard, created whole in one atomic step, as a
  well-built idempotent tool applies its effect and records its key in one transaction.

Every run needs the payload store: its prompt is padded past the store's threshold
(`chaos_store.THRESHOLD`), so its start input is a stored payload, which a worker taking
the run over reads back. One agent (`chaos-bulk`) goes further: its `bulk` tool's results,
and so its output, are stored payloads too.

`read_effects` reads both.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from chaos_store import THRESHOLD, append_log, read_log
from temporalio import activity
from temporalio.common import RetryPolicy

from towline import Agent, Limits, ToolContext, Usage, tool
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = [
    "ENTRY_MARK_ENV",
    "EFFECTS_ENV",
    "AGENTS",
    "IDEMPOTENT",
    "NON_IDEMPOTENT",
    "USAGE",
    "BULK",
    "Call",
    "Expected",
    "make_plan",
    "plan_prompt",
    "prompt_pad",
    "expected",
    "read_effects",
    "read_log",
]

EFFECTS_ENV = "CHAOS_EFFECTS"
"""Environment variable naming the folder the tools count in."""

USAGE = Usage(requests=1, input_tokens=100, output_tokens=7)
"""What every model response of the bench reports, so token totals are exact too."""

THINK = 0.4
"""Seconds each model response takes."""

CONFIRM = 0.3
"""Seconds the non-idempotent `charge` waits after charging."""

BULK = 4 * THRESHOLD
"""Characters of a `bulk` result and of the padding of a `chaos-bulk` prompt: stored payloads."""

HEARTBEAT = timedelta(seconds=2)
"""Tool and model heartbeat timeout: a SIGKILLed worker's attempt is retried within ~2 s."""

# Attempts are retried quickly and often: under a kill storm one call may lose several
# workers in a row. A non-idempotent tool retries only attempts that provably never
# entered the function (towline refuses the others), so many attempts are still safe.
_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=1.5,
                     maximum_interval=timedelta(seconds=2), maximum_attempts=30)


ENTRY_MARK_ENV = "TOWLINE_CHAOS_NO_ENTRY_MARK"
"""Set (non-empty) by `bench/chaos.py --no-entry-mark`: the non-idempotent tools record no
entry mark (`Tool.entry_mark=False`)."""
_MARK = not os.environ.get(ENTRY_MARK_ENV)


def _folder() -> Path:
    return Path(os.environ[EFFECTS_ENV])


def _record(ctx: ToolContext, label: str) -> dict[str, Any]:
    info = activity.info()
    return {"tool": ctx.tool_name, "key": ctx.idempotency_key, "label": label,
            "workflow_id": info.workflow_id, "activity_id": info.activity_id,
            "attempt": info.attempt, "pid": os.getpid(), "t": time.time()}


def _entered(ctx: ToolContext, label: str) -> None:
    append_log(_folder() / "exec.log", _record(ctx, label))


def _effect(ctx: ToolContext, label: str) -> None:
    append_log(_folder() / "effects.log", _record(ctx, label))


def _effect_once(ctx: ToolContext, label: str) -> None:
    """Apply the effect unless this idempotency key already did.

    The effect is the key's file: its record is written to a draft first, then linked into
    place under the key's name (`link` refuses a name that exists). A worker SIGKILLed
    anywhere in here leaves the whole effect or none. A marker written apart from its effect
    could be left alone by a kill between the two, and every later attempt would skip the
    effect for good (the chaos bench once caught exactly that).
    """
    marks = _folder() / "marks"
    marks.mkdir(exist_ok=True)
    name = ctx.idempotency_key.replace("/", "__")
    draft = marks / f".{name}.{os.getpid()}.{threading.get_ident()}"
    draft.write_text(json.dumps(_record(ctx, label), sort_keys=True))
    try:
        os.link(draft, marks / name)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


@tool(idempotent=True, retry_policy=_RETRY)
def tally(ctx: ToolContext, label: str) -> str:
    """Idempotent and quick: add `label` to a tally, once per idempotency key."""
    _entered(ctx, label)
    _effect_once(ctx, label)
    return f"tally:{label}"


@tool(retry_policy=_RETRY, entry_mark=_MARK)
def send(ctx: ToolContext, label: str) -> str:
    """Not idempotent and quick: send `label` (every execution sends it again)."""
    _entered(ctx, label)
    _effect(ctx, label)
    return f"send:{label}"


@tool(retry_policy=_RETRY, entry_mark=_MARK)
async def charge(ctx: ToolContext, label: str) -> str:
    """Not idempotent, async: charge for `label`, then wait for the payment's confirmation.

    Every execution charges again. The wait (`CONFIRM` seconds) is the window in which a
    lost worker leaves the call uncertain: charged, but never confirmed to the run.
    """
    _entered(ctx, label)
    _effect(ctx, label)
    await asyncio.sleep(CONFIRM)
    return f"charge:{label}"


@tool(idempotent=True, retry_policy=_RETRY)
async def crunch(ctx: ToolContext, label: str, seconds: float) -> str:
    """Idempotent and slow (async): record `label` once, then work `seconds` seconds."""
    _entered(ctx, label)
    _effect_once(ctx, label)
    await asyncio.sleep(seconds)
    return f"crunch:{label}"


@tool(idempotent=True, retry_policy=_RETRY)
def grind(ctx: ToolContext, label: str, seconds: float) -> str:
    """Idempotent and slow (sync, in a thread, no heartbeat code of its own)."""
    _entered(ctx, label)
    _effect_once(ctx, label)
    time.sleep(seconds)
    return f"grind:{label}"


def bulk_text(label: str, size: int) -> str:
    """What `bulk` returns: `size` characters drawn from `label` (one payload per call)."""
    return f"bulk:{label}:" + (f"{label}." * (size // (len(label) + 1) + 1))[:size]


@tool(idempotent=True, retry_policy=_RETRY)
def bulk(ctx: ToolContext, label: str, size: int) -> str:
    """Idempotent, with a large result: record `label` once, return `size` characters."""
    _entered(ctx, label)
    _effect_once(ctx, label)
    return bulk_text(label, size)


IDEMPOTENT = frozenset({"tally", "crunch", "grind", "bulk"})
"""Tools that may run more than once per call: their effect is applied once per key."""
NON_IDEMPOTENT = frozenset({"send", "charge"})
"""Tools whose every execution is an effect: a second execution of one call is a duplicate."""
SLOW = frozenset({"crunch", "grind"})


@dataclass(frozen=True)
class Call:
    """One planned tool call."""

    tool: str
    label: str
    seconds: float = 0.0
    size: int = 0
    """Characters a `bulk` call returns."""

    def args(self) -> dict[str, Any]:
        if self.tool in SLOW:
            return {"label": self.label, "seconds": self.seconds}
        if self.tool == "bulk":
            return {"label": self.label, "size": self.size}
        return {"label": self.label}

    @property
    def content(self) -> str:
        """What the tool returns."""
        if self.tool == "bulk":
            return bulk_text(self.label, self.size)
        return f"{self.tool}:{self.label}"


def plan_prompt(plan: list[list[Call]], pad: int = 0) -> str:
    """The prompt that makes an agent follow `plan`, padded by `pad` characters."""
    prompt: dict[str, Any] = {
        "plan": [[[c.tool, c.label, c.seconds, c.size] for c in step] for step in plan]}
    if pad:
        prompt["pad"] = bulk_text("pad", pad)
    return json.dumps(prompt)


def prompt_pad(agent: str) -> int:
    """How much padding the prompts of `agent` get: every prompt is a stored payload, so a
    worker replaying any run needs the store; `chaos-bulk`'s are larger still."""
    return BULK if agent == "chaos-bulk" else THRESHOLD


def _plan_of(messages: list[Message]) -> list[list[Call]]:
    prompt = next(p.text for m in messages if isinstance(m, ModelRequest)
                  for p in m.parts if isinstance(p, UserPart))
    raw: list[list[list[Any]]] = json.loads(prompt)["plan"]
    return [[Call(str(t), str(label), float(s), int(n)) for t, label, s, n in step]
            for step in raw]


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)]


def answer(returns: list[tuple[str, Any]]) -> str:
    """The final answer: every return's status and content, in order."""
    return " | ".join(f"{status}={content}" for status, content in returns)


async def follow_plan(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Request k makes step k's calls (in one response); the request after the last answers.

    Each answer takes `THINK` seconds, as a (fast) model's would.
    """
    del info
    await asyncio.sleep(THINK)
    plan = _plan_of(messages)
    done = sum(1 for m in messages if isinstance(m, ModelResponse))
    if done < len(plan):
        return ModelResponse(parts=[
            ToolCallPart(tool_name=c.tool, args=c.args(), tool_call_id=f"c{done + 1}-{i}")
            for i, c in enumerate(plan[done])
        ])
    return answer([(r.status, r.content) for r in _returns(messages)])


def _agent(name: str, tools: list[Any]) -> Agent:
    return Agent(
        name=name,
        model=FunctionModel(follow_plan, model_name=f"{name}-script", usage=USAGE),
        tools=tools,
        limits=Limits(max_steps=20),
        tool_heartbeat_timeout=HEARTBEAT,
        model_heartbeat_timeout=HEARTBEAT,
        model_timeout=timedelta(seconds=30),
        model_retry_policy=_RETRY,
    )


AGENTS = [
    _agent("chaos-idempotent", [tally]),
    _agent("chaos-once", [tally, send, charge]),
    _agent("chaos-slow", [tally, crunch, grind]),
    _agent("chaos-fanout", [tally, send, charge, crunch, grind]),
    _agent("chaos-bulk", [tally, send, bulk]),
]
"""Every agent the chaos workers serve."""


def make_plan(agent: str, run: int, rng: Any) -> list[list[Call]]:
    """A plan for run number `run` of `agent`, drawn from `rng` (a `random.Random`)."""

    def label(step: int, i: int) -> str:
        return f"r{run}s{step}c{i}"

    def slow(name: str, step: int, i: int) -> Call:
        return Call(name, label(step, i), round(rng.uniform(1.0, 2.0), 1))

    steps: list[list[Call]] = []
    if agent == "chaos-idempotent":  # a long loop of quick idempotent calls
        steps = [[Call("tally", label(s, 0))] for s in range(rng.randint(8, 12))]
    elif agent == "chaos-once":  # non-idempotent calls between idempotent ones
        for s in range(rng.randint(4, 7)):
            name = rng.choice(["tally", "send", "charge"]) if s else "send"
            steps.append([Call(name, label(s, 0))])
    elif agent == "chaos-slow":  # calls that take a second or two
        for s in range(rng.randint(3, 5)):
            steps.append([slow(rng.choice(["crunch", "grind"]), s, 0)])
    elif agent == "chaos-fanout":  # parallel calls of every kind in one response
        for s in range(rng.randint(3, 4)):
            names = rng.sample(["tally", "send", "charge", "crunch", "grind"], rng.randint(2, 3))
            steps.append([slow(n, s, i) if n in SLOW else Call(n, label(s, i))
                          for i, n in enumerate(names)])
    elif agent == "chaos-bulk":  # large prompt and results (stored payloads), and effects
        steps.append([Call("bulk", label(0, 0), size=BULK)])
        for s in range(1, rng.randint(3, 5)):
            names = rng.sample(["tally", "send", "bulk"], rng.randint(1, 2))
            steps.append([Call(n, label(s, i), size=BULK if n == "bulk" else 0)
                          for i, n in enumerate(names)])
    else:
        raise ValueError(f"no plan for agent {agent!r}")
    return steps


@dataclass(frozen=True)
class Expected:
    """What a run that follows its plan to the end must record."""

    run_step: int
    requests: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    output: str


def expected(plan: list[list[Call]], steps_done: int | None = None) -> Expected:
    """The ledger after `steps_done` model requests (default: the whole plan and the answer).

    A request that made calls counts them all as started (they are admitted together).
    """
    requests = len(plan) + 1 if steps_done is None else steps_done
    calls = sum(len(step) for step in plan[:requests])
    output = answer([("succeeded", c.content) for step in plan for c in step])
    return Expected(run_step=requests, requests=requests, tool_calls=calls,
                    input_tokens=requests * USAGE.input_tokens,
                    output_tokens=requests * USAGE.output_tokens, output=output)


def read_effects(folder: Path) -> list[dict[str, Any]]:
    """Every applied effect: the non-idempotent tools' log, then the idempotent tools' keys.

    Drafts (dot files) are left out: a draft never linked into place is no effect.
    """
    marks = folder / "marks"
    keyed = sorted(marks.glob("[!.]*")) if marks.exists() else []
    return read_log(folder, "effects.log") + [json.loads(p.read_text()) for p in keyed]
