"""`HistoryWindow`: send the model only the most recent messages.

A projection (`request_messages`), not an edit: the canonical history keeps
every message, so the run's record, its queries and later capabilities still
see the whole conversation.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.messages import Message, ModelRequest, SystemPart

from ._config import check_int
from ._pairing import start_dropping_orphans, start_keeping_calls
from .base import Capability
from .state import ModelRequestState

__all__ = ["HistoryWindow", "window"]


@dataclass(frozen=True)
class HistoryWindow(Capability):
    """Send only the last `max_messages` messages, in `before_model_request`.

    The cut never separates a tool call from its return: when the window would
    begin with returns whose call falls outside it, those messages are left out
    too (the window gets shorter). Only when that would leave nothing (the
    newest message itself answers an older call) does the window grow back to
    include the call instead. System parts of cut-off messages are kept, first
    (the agent's own instructions are always sent first anyway). The window is
    taken over `request_messages`, so it composes with projections that run
    before it in the capability list.
    """

    max_messages: int
    """How many of the most recent messages to send (>= 1; older system parts come on top)."""

    def __post_init__(self) -> None:
        check_int("HistoryWindow", "max_messages", self.max_messages, 1)

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        """Replace `request_messages` with the window."""
        return state.model_copy(
            update={"request_messages": window(state.request_messages, self.max_messages)}
        )


def window(messages: list[Message], max_messages: int) -> list[Message]:
    """The last `max_messages` of `messages`, paired, with earlier system parts first."""
    if len(messages) <= max_messages:
        return list(messages)
    start = start_dropping_orphans(messages, len(messages) - max_messages)
    if start >= len(messages):
        start = start_keeping_calls(messages, len(messages) - max_messages)
    kept_system: list[Message] = []
    for m in messages[:start]:
        if isinstance(m, ModelRequest):
            parts = [p for p in m.parts if isinstance(p, SystemPart)]
            if parts:
                kept_system.append(m if len(parts) == len(m.parts) else
                                   m.model_copy(update={"parts": parts}))
    return [*kept_system, *messages[start:]]
