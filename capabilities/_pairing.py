"""Tool call / return pairing helpers shared by the history-shaping capabilities.

A history may only be cut at a point where no kept tool return (or tool retry)
refers to a call that was cut away: providers reject a return without its call,
and the model would lose what the return answers. These helpers find such cuts.
"""

from __future__ import annotations

from collections.abc import Sequence

from towline.messages import Message, ModelRequest, ModelResponse, RetryPart, ToolReturnPart

__all__ = ["call_ids", "answered_ids", "orphaned", "start_keeping_calls", "start_dropping_orphans"]


def call_ids(message: Message) -> set[str]:
    """Ids of the tool calls a response makes."""
    if isinstance(message, ModelResponse):
        return {c.tool_call_id for c in message.tool_calls}
    return set()


def answered_ids(message: Message) -> set[str]:
    """Ids of the tool calls a request answers (tool returns and tool retries)."""
    if not isinstance(message, ModelRequest):
        return set()
    found: set[str] = set()
    for part in message.parts:
        if isinstance(part, ToolReturnPart | RetryPart) and part.tool_call_id:
            found.add(part.tool_call_id)
    return found


def orphaned(messages: Sequence[Message]) -> set[str]:
    """Call ids answered in `messages` whose call is not in `messages`."""
    calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        calls |= call_ids(m)
        answered |= answered_ids(m)
    return answered - calls


def start_keeping_calls(messages: Sequence[Message], start: int) -> int:
    """The largest index <= `start` from which every kept return's call is kept too.

    Moves the cut earlier, to the response that made each call a kept return answers.
    Returns whose call is nowhere in `messages` (already orphaned) are ignored.
    """
    start = max(0, min(start, len(messages)))
    while start > 0:
        missing = orphaned(messages[start:])
        earlier = [i for i in range(start) if call_ids(messages[i]) & missing]
        if not earlier:
            return start
        start = min(earlier)
    return start


def start_dropping_orphans(messages: Sequence[Message], start: int) -> int:
    """The smallest index >= `start` from which no kept return lacks its call.

    Moves the cut later, past messages that answer calls made before the cut.
    Returns `len(messages)` when no such index exists before the end.
    """
    start = max(0, min(start, len(messages)))
    while start < len(messages):
        missing = orphaned(messages[start:])
        before = set[str]().union(*(call_ids(m) for m in messages[:start]))
        if not (missing & before):
            return start
        start += 1
    return start
