"""`TodoList`: a planning tool whose list lives in the run's state.

The model keeps a todo list with the `write_todos` tool (each call replaces the
whole list). The list is the contributed state key `todos`, so it is durable
(carried across continue-as-new), visible in `RunResult.state` and the `state`
query while the run goes on, and shown to the model in the instructions of
every request, so it survives history windows and summaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from towline.errors import ConfigurationError
from towline.tools import Tool, ToolResult

from .base import Capability
from .state import ModelRequestState

__all__ = ["TodoList", "Todo", "write_todos", "TODO_INSTRUCTIONS", "render_todos"]

TodoStatus = Literal["pending", "in_progress", "completed"]


class Todo(BaseModel):
    """One item of the todo list."""

    model_config = ConfigDict(extra="forbid")

    content: str
    """What is to be done."""
    status: TodoStatus = "pending"
    """`pending`, `in_progress` or `completed`."""


TODO_INSTRUCTIONS = (
    "For work with several steps, keep a todo list with the `write_todos` tool: pass the "
    "whole list each time (it replaces the previous one), mark an item `in_progress` when "
    "you start it and `completed` as soon as it is done."
)
"""The instruction `TodoList` appends by default."""


def render_todos(todos: list[dict[str, Any]]) -> str:
    """The list as the model reads it: one `- [status] content` line per item."""
    return "\n".join(f"- [{t.get('status', 'pending')}] {t.get('content', '')}" for t in todos)


async def _write_todos(todos: list[Todo]) -> ToolResult:
    """Replace the todo list with `todos` (the complete, updated list)."""
    items = [t.model_dump(mode="json") for t in todos]
    summary = render_todos(items) if items else "(empty)"
    return ToolResult(content=f"Todo list updated:\n{summary}", state={"todos": items})


write_todos = Tool.from_function(_write_todos, name="write_todos", in_workflow=True)
"""The contributed tool. It runs as workflow code (no I/O): it only returns a state update."""


@dataclass(frozen=True)
class TodoList(Capability):
    """Contributes `write_todos`, the state key `todos` and a short instruction.

    `write_todos` is an `in_workflow` tool: it returns a `ToolResult` whose
    `state` update the runtime commits when the call is recorded, so the todos
    reach `RunResult.state["todos"]` and the `state` query.
    """

    instructions: str = TODO_INSTRUCTIONS
    """Appended to the request's instructions (empty: append nothing but the current list)."""
    show_todos: bool = True
    """Also append the current list, so the model sees it even when history is trimmed."""

    tools = (write_todos,)
    state_schema = MappingProxyType({"todos": []})

    def __post_init__(self) -> None:
        if not isinstance(self.instructions, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("TodoList.instructions must be a string")

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        """Append the instruction (and the current list) to the request's instructions."""
        extra: list[str] = [self.instructions] if self.instructions else []
        todos: list[dict[str, Any]] = list(state.state.get("todos") or [])
        if self.show_todos and todos:
            extra.append(f"Current todo list:\n{render_todos(todos)}")
        if not extra:
            return state
        base = state.agent.instructions
        text = "\n\n".join([base, *extra] if base else extra)
        agent = state.agent.model_copy(update={"instructions": text})
        return state.model_copy(update={"agent": agent})
