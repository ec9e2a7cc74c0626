"""`ContextEditing`: clear the contents of old tool returns once a request grows large.

Tool output (file contents, search results, API payloads) is usually the bulk
of a long run's context and is rarely needed again once the model has acted on
it. This capability replaces the content of older tool returns with a short
placeholder in what is sent, keeping the call/return pairs (and their status)
intact so the model still knows which tools it called and how they went.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    ToolCallPart,
    ToolReturnPart,
)

from ._config import check_int, check_names, check_str
from .base import Capability
from .state import ModelRequestState

__all__ = ["ContextEditing", "request_chars", "clear_tool_returns"]


@dataclass(frozen=True)
class ContextEditing(Capability):
    """Clear old tool returns in `request_messages` when the request exceeds `trigger_chars`.

    Works on the request only: the canonical history keeps every tool result.
    Idempotent: applying it to an already edited request changes nothing.
    """

    trigger_chars: int = 100_000
    """Edit only when the request's content exceeds this many characters."""
    keep_last: int = 3
    """How many of the most recent tool returns keep their content."""
    placeholder: str = "[tool output cleared to save context]"
    """What an old tool return's content is replaced with."""
    exclude_tools: frozenset[str] = field(default_factory=frozenset[str])
    """Tools whose returns are never cleared."""

    def __post_init__(self) -> None:
        check_int("ContextEditing", "trigger_chars", self.trigger_chars, 0)
        check_int("ContextEditing", "keep_last", self.keep_last, 0)
        check_str("ContextEditing", "placeholder", self.placeholder)
        names = check_names("ContextEditing", "exclude_tools", self.exclude_tools)
        object.__setattr__(self, "exclude_tools", frozenset(names))

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        """Replace `request_messages` with the edited request when it is over the trigger."""
        if request_chars(state.request_messages) <= self.trigger_chars:
            return state
        edited = clear_tool_returns(
            state.request_messages, self.keep_last, self.placeholder, self.exclude_tools
        )
        return state.model_copy(update={"request_messages": edited})


def _chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    return len(json.dumps(content, sort_keys=True, default=str))


def request_chars(messages: list[Message]) -> int:
    """Characters of content in `messages` (text, tool arguments and tool results)."""
    total = 0
    for m in messages:
        if isinstance(m, ModelRequest):
            total += sum(_chars(p.content) for p in m.parts)
        else:
            for p in m.parts:
                if isinstance(p, ToolCallPart | NativeToolCallPart):
                    total += _chars(p.args)
                elif isinstance(p, NativeToolReturnPart):
                    total += _chars(p.content)
                else:
                    total += len(p.content)
    return total


def clear_tool_returns(
    messages: list[Message], keep_last: int, placeholder: str,
    exclude_tools: frozenset[str] = frozenset(),
) -> list[Message]:
    """`messages` with the content of all but the last `keep_last` tool returns replaced."""
    positions = [
        (i, j) for i, m in enumerate(messages) if isinstance(m, ModelRequest)
        for j, p in enumerate(m.parts)
        if isinstance(p, ToolReturnPart) and p.tool_name not in exclude_tools
    ]
    clear = set(positions[: max(0, len(positions) - keep_last)])
    if not clear:
        return list(messages)
    out: list[Message] = []
    for i, m in enumerate(messages):
        if isinstance(m, ModelResponse) or not any((i, j) in clear for j in range(len(m.parts))):
            out.append(m)
            continue
        parts = [
            p.model_copy(update={"content": placeholder})
            if (i, j) in clear and isinstance(p, ToolReturnPart) else p
            for j, p in enumerate(m.parts)
        ]
        out.append(m.model_copy(update={"parts": parts}))
    return out
