"""Handoffs on the workflow side: the run goes on as another agent (`towline.capabilities.Handoff`).

A handoff tool asks for the handoff while its batch of calls runs (`request`); once the
batch is recorded, `complete` makes it: the target's version is checked (a marker, as for
the run's first agent), the conversation is filtered if the handoff says so, and the run
becomes the target (`become`): its instructions, model, settings, tools (MCP servers'
included) and capabilities from the next request on; the counters, limits, ancestor
authority and the `stream` choice stay the run's. Continue-as-new carries the handoffs, and
the next execution goes on as the last one's target (`resume`). The client's tools
(`RunInput.client_tools`) stay the run's across handoffs, and one may never take the place of
a target's tool (`client_tools.check_names`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from towline.agent import Agent
from towline.capabilities.base import is_activity
from towline.errors import CapabilityViolation, ToolError, UnknownAgent, runtime_failure
from towline.events import EventType
from towline.messages import Message, ModelRequest, ModelResponse, ToolReturnPart
from towline.results import HandoffRecord
from towline.runtime.registry import WorkerAgents
from towline.tools import ToolContext

from .agent_versions import recorded_version
from .client_tools import check_names
from .events import emit
from .guard import Guard, guarded, is_user_code
from .hooks import copy_messages, hook_failure, maybe_await
from .mcp_tools import restore_mcp_tools
from .run import Run

__all__ = ["PendingHandoff", "request", "complete", "become", "resume", "agent_path"]


@dataclass(frozen=True)
class PendingHandoff:
    """A handoff a tool call asked for, made once its batch is recorded."""

    target: str
    input_filter: Callable[[list[Message]], Any] | None
    call_id: str
    step: int
    on_handoff: Callable[..., Any] | None = None
    """`Handoff.on_handoff`, called once the handoff is made."""


def request(run: Run, target: str, input_filter: Callable[[list[Message]], Any] | None,
            ctx: ToolContext, *, on_handoff: Callable[..., Any] | None = None) -> None:
    """Ask for a handoff to `target` (from the handoff tool); one per response."""
    pending: PendingHandoff | None = run.pending_handoff
    if pending is not None:
        raise ToolError(f"this response already handed the run to {pending.target!r} (call "
                        f"{pending.call_id}): one handoff per response")
    run.pending_handoff = PendingHandoff(target, input_filter, ctx.tool_call_id, ctx.run_step,
                                         on_handoff)


async def complete(run: Run, worker: WorkerAgents) -> None:
    """Make the handoff the last batch asked for, if any (its returns are recorded)."""
    pending: PendingHandoff | None = run.pending_handoff
    if pending is None:
        return
    run.pending_handoff = None
    target = _registered(worker, pending.target)
    recorded_version(worker, target, "was handed to")
    if pending.input_filter is not None:
        where = f"Handoff({target.name}).input_filter"
        run.conversation.messages = await _filtered(run.conversation.messages, pending.input_filter, where)
    record = HandoffRecord(step=pending.step, from_agent=run.agent.name, to_agent=target.name,
                           call_id=pending.call_id)
    if pending.on_handoff is not None:  # OpenAI's on_handoff
        await _called(pending.on_handoff, record, f"Handoff({target.name}).on_handoff")
    become(run, target)
    run.handoffs.append(record)
    emit(run.stream, EventType.HANDOFF, step=record.step, from_agent=record.from_agent,
         to_agent=record.to_agent, call_id=record.call_id, path=agent_path(run))
    run.ledger.confirm()


def become(run: Run, agent: Agent) -> None:
    """Make `agent` the run's active agent (the run's counters, limits and authority stay).

    The client's tools are the run's and stay, unless one has the name of a tool of `agent`
    (the run fails `InvalidRunInput`: it would take that tool's place)."""
    check_names(run.inventory.client_tools.values(), [agent])
    run.agent = agent
    run.inventory.tools = dict(agent.inventory)
    run.inventory.tools.update(run.inventory.client_tools)
    restore_mcp_tools(run)  # the servers' tools this agent lists (listed before its next turn)
    run.model = agent.model_name
    run.settings = agent.settings.model_copy(update={"stream": run.settings.stream})
    for key, value in agent.state_defaults().items():
        run.state.setdefault(key, value)  # its capabilities' keys; the run's values stay


def resume(run: Run, worker: WorkerAgents, records: Sequence[HandoffRecord]) -> None:
    """A continued execution goes on as the agent its run was last handed to."""
    if not records:
        return
    target = _registered(worker, records[-1].to_agent)
    recorded_version(worker, target, "was handed to")
    run.handoffs = list(records)
    become(run, target)


def agent_path(run: Run) -> list[str]:
    """The agents the run has been, from the first to the active one."""
    if not run.handoffs:
        return [run.agent.name]
    return [run.handoffs[0].from_agent, *(h.to_agent for h in run.handoffs)]


def _registered(worker: WorkerAgents, name: str) -> Agent:
    agent = worker.agent(name)
    if agent is None:
        raise runtime_failure(UnknownAgent(
            f"the run was handed to agent {name!r}, which this worker has not registered "
            "(register it on every worker of the task queue: TowlinePlugin(agents=[...]))"))
    return agent


ON_HANDOFF_TIMEOUT = timedelta(minutes=5)
"""How long one attempt of an `on_handoff` activity may take."""
ON_HANDOFF_ATTEMPTS = 3
"""Attempts of an `on_handoff` activity before the run fails."""


async def _called(fn: Callable[..., Any], record: HandoffRecord, where: str) -> None:
    """Call `on_handoff`: schedule it, if it is an activity (once: a replay takes its result
    from the history), else run it as hook code. Its return is ignored; a failure fails the
    run `CapabilityViolation`."""
    if is_activity(fn):
        try:
            await workflow.execute_activity(
                fn, record, start_to_close_timeout=ON_HANDOFF_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=ON_HANDOFF_ATTEMPTS),
                summary=f"on_handoff: {record.from_agent} -> {record.to_agent}")
        except ActivityError as e:
            cause = e.cause
            kind = cause.type if isinstance(cause, ApplicationError) and cause.type else (
                type(cause).__name__ if cause is not None else "ActivityError")
            raise runtime_failure(CapabilityViolation(
                f"{where} failed ({kind}; its attempts are in the run's history)")) from None
        return
    try:
        if is_user_code(fn):
            await guarded(Guard(where), fn, record.model_copy())
        else:
            await maybe_await(fn(record.model_copy()))
    except Exception as e:
        raise hook_failure(e, where) from e


async def _filtered(messages: list[Message], fn: Callable[[list[Message]], Any],
                    where: str) -> list[Message]:
    """What an input filter made of the conversation: fresh, valid, every call answered."""
    try:
        if is_user_code(fn):
            result: Any = await guarded(Guard(where), fn, copy_messages(messages))
        else:
            result = await maybe_await(fn(copy_messages(messages)))
    except Exception as e:
        raise hook_failure(e, where) from e
    kind = type(result).__name__
    items: list[Any] = list(result) if isinstance(result, list) else []  # pyright: ignore[reportUnknownArgumentType]
    if kind != "list" or not all(isinstance(m, ModelRequest | ModelResponse) for m in items):
        raise CapabilityViolation(f"{where} returned {kind}, not a list of messages")
    given: list[Message] = items
    try:
        fresh = copy_messages(given)
    except Exception as e:  # noqa: BLE001 - an invalid message
        raise CapabilityViolation(f"{where} returned an invalid message: {e}") from None
    calls = Counter(c.tool_call_id for m in fresh if isinstance(m, ModelResponse) for c in m.tool_calls)
    returns = Counter(p.tool_call_id for m in fresh if isinstance(m, ModelRequest)
                      for p in m.parts if isinstance(p, ToolReturnPart))
    if calls != returns:
        unpaired = sorted((calls - returns) + (returns - calls))
        raise CapabilityViolation(f"{where} left tool calls and returns unpaired: {unpaired}")
    return fresh
