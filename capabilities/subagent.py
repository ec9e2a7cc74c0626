"""`Subagent`: a tool that delegates a task to another agent, run as a child workflow.

The parent's model calls the contributed tool (named `task` by default) with a
self-contained prompt; the child agent runs as its own `AgentRun` child
workflow (visible and inspectable in the Temporal UI, id
`<parent run id>/<tool call id>`), and its final output is the tool's return.

- Ancestor authority: the child may execute only tools the parent run may
  execute; a child calling any other tool gets `denied`. The child's own
  `Subagent` tools are the exception, so sub-agents nest: delegating executes
  nothing by itself, and the grandchild is held to the same authority.
- The child's usage is folded into the parent's usage and ledger.
- A child that fails comes back to the parent's model as a `failed` tool
  return (with the child's failure reason), not as a crash of the parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError, ChildWorkflowError

from towline.errors import ConfigurationError, ToolError
from towline.hooks import hook_context
from towline.messages import Usage
from towline.results import PartialRun
from towline.tools import Tool, ToolContext, ToolResult

from .base import Capability

if TYPE_CHECKING:
    from towline.agent import Agent

__all__ = ["Subagent"]


@dataclass(frozen=True)
class Subagent(Capability):
    """Contributes a tool `name(prompt)` that runs `agent` as a child `AgentRun`.

    The child agent is registered on every worker that registers the parent
    (through `agents`), and runs on the parent's task queue.
    """

    agent: Agent
    """The agent that does the delegated task."""
    name: str = "task"
    """The tool's name (unique in the parent's inventory)."""
    description: str | None = None
    """Shown to the parent's model; defaults to one naming the child agent."""

    def __post_init__(self) -> None:
        from towline.agent import Agent

        if not isinstance(self.agent, Agent):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"Subagent needs an Agent, not {type(self.agent).__name__}")
        if self.description is None:
            text = (f"Delegate a task to the sub-agent {self.agent.name!r}. Give it a complete, "
                    "self-contained prompt; it answers with its final output.")
            object.__setattr__(self, "description", text)
        # One function for every Subagent, so two agents on a worker may both have a `task`
        # tool (the plugin refuses two different functions under one tool name).
        tool = Tool.from_function(
            _delegate, name=self.name, description=self.description, in_workflow=True,
        )  # validates the name
        object.__setattr__(self, "_tool", tool)

    @property
    def tools(self) -> tuple[Tool, ...]:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The delegating tool (one instance per capability, so inventories agree)."""
        tool: Tool = self.__dict__["_tool"]
        return (tool,)

    @property
    def agents(self) -> tuple[Agent, ...]:
        """The child agent, so a plugin registering the parent registers it too."""
        return (self.agent,)


def _delegations(agent: Agent) -> dict[str, Agent]:
    """The agent's `Subagent` tools: tool name -> the agent it delegates to."""
    return {cap.name: cap.agent for cap in agent.capabilities if isinstance(cap, Subagent)}


async def _delegate(ctx: ToolContext, prompt: str) -> ToolResult:
    """Run the sub-agent on `prompt` as a child workflow; its output is the return."""
    hook = hook_context()
    child_agent = _delegations(hook.run.agent).get(ctx.tool_name)
    if child_agent is None:  # the tool was lifted out of its Subagent into `tools=[...]`
        raise ToolError(f"tool {ctx.tool_name!r} delegates only through a Subagent capability")
    child = child_agent.name
    # the parent's authority, plus the child's own delegation tools (they run nothing
    # themselves; what the grandchild runs is held to this same authority)
    authority = sorted(hook.authority() | set(_delegations(child_agent)))
    try:  # on the parent's task queue, with its priority
        result = await hook.run_agent(child, prompt, id=f"{ctx.run_id}/{ctx.tool_call_id}",
                                      allowed_tools=authority, summary=f"{child}: {prompt[:80]}")
    except ChildWorkflowError as e:
        cause = e.cause
        if isinstance(cause, ApplicationError):
            reason, message, usage = cause.type or "failure", cause.message, _spent(cause)
        else:
            reason, message, usage = type(cause or e).__name__, str(cause or e), None
        raise ToolError(f"sub-agent {child!r} failed ({reason}): {message}", usage) from e
    return ToolResult(content=result.output, usage=result.usage)


def _spent(failure: ApplicationError) -> Usage | None:
    """The usage a failed child run had incurred (from the partial run in its details)."""
    if not failure.details:
        return None
    try:
        return PartialRun.model_validate(failure.details[0]).usage
    except ValidationError:
        return None
