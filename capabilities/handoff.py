"""`Handoff`: a tool that hands the run over to another agent, which goes on with the conversation.

The model calls the contributed tool `transfer_to_<name>` (no arguments). Once the calls of
that response are recorded, the same run continues as the target agent: its instructions,
model, tools and capabilities (and its output type) from the next request on, with the
conversation as it is, or as `input_filter` rewrites it. Unlike a `Subagent`, nothing is
delegated and nothing comes back: there is one run, one workflow, one ledger.

- The ledger goes on: the counters are the run's (not reset), and `max_steps` and every
  other limit are the run's. The run's `TowlineAgent` search attribute and agent version
  stay those of the agent it started as (what clients list it by).
- Authority: from the handoff on, only the target's tools may execute (a call of the
  previous agent's tools is `denied`), narrowed by any ancestor's authority; a handoff tool
  executes nothing itself, so it is exempt from that authority.
- The active agent and the path of handoffs are in the `state` query, the current details
  in the Temporal UI, the `handoff` live event, `RunResult.handoffs` (and a failure's partial
  run), and `towline show`; the model activities name the agent that asked.
- The target agent must be registered on every worker that serves the run: an `Agent`
  target is (workers register it with the agent that hands off); a target given by name
  must be registered by the worker itself. Each handoff records the target's version (a
  marker), so a replay with another definition of it waits for a worker that has it, as a
  run does for its first agent. A continue-as-new, a replay and a fork at a later step all
  go on as the agent that was active.
- At most one handoff per response: a second `transfer_to_*` call in the same response
  fails (the model is told the first one was taken).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from towline.errors import ConfigurationError, ToolError
from towline.hooks import hook_context
from towline.messages import Message, ModelResponse, RetryPart, ToolCallPart, ToolReturnPart
from towline.results import HandoffRecord
from towline.tools import HANDOFF_KEY, Tool, ToolContext

from .base import ADDED_OPTION, Capability, is_activity

if TYPE_CHECKING:
    from towline.agent import Agent

__all__ = ["Handoff", "InputFilter", "OnHandoff", "handoff_tool_name", "remove_tool_calls",
           "TRANSFERRED"]

InputFilter = Callable[[list[Message]], list[Message]]
"""`input_filter(messages) -> messages`: the conversation the target agent goes on with."""
OnHandoff = Callable[[HandoffRecord], None | Awaitable[None]]
"""`on_handoff(record)`: workflow code run once when the handoff is made (see `Handoff`)."""

TRANSFERRED = "Transferred to {agent}: it handles the conversation from here."
"""The handoff tool's return, as the model sees it."""

_UNSAFE = re.compile(r"[^a-z0-9_]+")


def handoff_tool_name(agent_name: str) -> str:
    """`transfer_to_<name>`: the agent's name lowercased, other characters as `_`."""
    return "transfer_to_" + (_UNSAFE.sub("_", agent_name.lower()).strip("_") or "agent")


@dataclass(frozen=True)
class Handoff(Capability):
    """Contributes `transfer_to_<name>`, which hands the run over to `agent`."""

    agent: Agent | str
    """The agent the run continues as: an `Agent` (workers register it with this agent), or
    the name of one the worker registers itself (so two agents may hand off to each other)."""
    description: str | None = None
    """Shown to the model as the tool's description; defaults to one naming the agent."""
    input_filter: InputFilter | None = None
    """`input_filter(messages) -> messages`, run once at the handoff as workflow code (under the
    determinism guard): the conversation the target goes on with, which becomes the run's
    (`RunResult.messages` holds it; the Temporal history keeps the requests that carried what it
    dropped). Every tool call it keeps needs its return, and every return its call, or the run
    fails `CapabilityViolation`. `remove_tool_calls` is one."""
    on_handoff: OnHandoff | None = field(default=None, metadata={ADDED_OPTION: True})
    """Called once with the `HandoffRecord` when the handoff is made (after `input_filter`,
    before the target's first request); engine 5. Two kinds, as capabilities have:

    - an `@activity.defn` function (sync or async) is an **activity**: scheduled once per
      handoff (summary `on_handoff: <from> -> <to>`), retried by Temporal (3 attempts), never
      run again by a replay, free to do I/O; workers serving the agent register it. The run
      waits for it; if every attempt fails, the run fails `CapabilityViolation`.
    - any other function (sync or async) is **hook code**: workflow code under the
      determinism guard, like every capability hook, so a replay runs it again and it must
      do the same each time (no I/O, clock or randomness).

    Its return is ignored; if it raises, the run fails `CapabilityViolation`."""
    tool_name: str | None = field(default=None, metadata={ADDED_OPTION: True})
    """The handoff tool's name, as the model sees and calls it (None: `transfer_to_<name>`;
    OpenAI's `tool_name_override`)."""

    def __post_init__(self) -> None:
        from towline.agent import Agent

        if isinstance(self.agent, str):
            if not self.agent:
                raise ConfigurationError("Handoff needs an agent or an agent's name")
        elif not isinstance(self.agent, Agent):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"Handoff needs an Agent or a name, not {type(self.agent).__name__}")
        if self.input_filter is not None and not callable(self.input_filter):
            raise ConfigurationError("Handoff.input_filter must be callable")
        if self.description is not None and not isinstance(self.description, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("Handoff.description must be a string")
        if self.on_handoff is not None and not callable(self.on_handoff):
            raise ConfigurationError("Handoff.on_handoff must be callable")
        if self.tool_name is not None and (
                not isinstance(self.tool_name, str)  # pyright: ignore[reportUnnecessaryIsInstance]
                or not self.tool_name.replace("_", "a").replace("-", "a").isalnum()):
            raise ConfigurationError(f"Handoff.tool_name {self.tool_name!r} must be alphanumeric, "
                                     "'_' or '-'")

        target = self.target
        description = self.description or (
            f"Hand the conversation over to the agent {target!r}, which then answers the user "
            "and has its own tools. Call it when that agent is the right one to go on.")
        # One function for every handoff (the plugin refuses two functions under one name).
        tool = Tool.from_function(_transfer, name=self.tool_name or handoff_tool_name(target),
                                  description=description,
                                  in_workflow=True, metadata={HANDOFF_KEY: target})
        object.__setattr__(self, "_tool", tool)

    @property
    def target(self) -> str:
        """The name of the agent the run is handed to."""
        return self.agent if isinstance(self.agent, str) else self.agent.name

    @property
    def activities(self) -> tuple[Callable[..., Any], ...]:  # pyright: ignore[reportIncompatibleVariableOverride]
        """`on_handoff`, when it is an activity, for workers to register."""
        fn = self.on_handoff
        return (fn,) if fn is not None and is_activity(fn) else ()

    @property
    def transfer_tool(self) -> str:
        """The handoff tool's name: `tool_name`, or `transfer_to_<name>`."""
        return self.tool_name or handoff_tool_name(self.target)

    @property
    def name(self) -> str:
        """The capability's name, as failures name it: `Handoff(<agent>)`."""
        return f"Handoff({self.target})"

    @property
    def tools(self) -> tuple[Tool, ...]:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The handoff tool (one instance per capability, so inventories agree)."""
        tool: Tool = self.__dict__["_tool"]
        return (tool,)

    @property
    def agents(self) -> tuple[Agent, ...]:
        """The target agent, so a plugin registering this agent registers it too."""
        return () if isinstance(self.agent, str) else (self.agent,)


async def _transfer(ctx: ToolContext) -> str:
    """Ask the run to go on as this tool's agent once the response's calls are recorded."""
    hook = hook_context()
    found = [c for c in hook.run.agent.capabilities
             if isinstance(c, Handoff) and c.transfer_tool == ctx.tool_name]
    if not found:  # the tool was lifted out of its Handoff into `tools=[...]`
        raise ToolError(f"tool {ctx.tool_name!r} hands off only through a Handoff capability")
    handoff = found[0]
    hook.hand_off(handoff.target, ctx, input_filter=handoff.input_filter,
                 on_handoff=handoff.on_handoff)
    return TRANSFERRED.format(agent=handoff.target)


def remove_tool_calls(messages: list[Message]) -> list[Message]:
    """An `input_filter`: the conversation without tool calls and their returns (the handoff's
    own included, and retry requests answering a call), so the target reads only what the
    user and the agents said."""
    kept: list[Message] = []
    for m in messages:
        if isinstance(m, ModelResponse):
            parts: list[Any] = [p for p in m.parts if not isinstance(p, ToolCallPart)]
        else:
            parts = [p for p in m.parts if not isinstance(p, ToolReturnPart)
                     and not (isinstance(p, RetryPart) and p.tool_call_id)]
        if parts:
            kept.append(m.model_copy(update={"parts": parts}))
    return kept

