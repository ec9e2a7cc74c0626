"""`Conversation`: a run's canonical history, the messages its model requests are made of.

A part of `Run` (`Run.conversation`). Only the runtime writes here, and it keeps one rule:
every tool call the model made gets exactly one return record, next to the response that made
it, as providers require (`close_unpaired`, `record_returns`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from temporalio import workflow

from towline.messages import Message, ModelRequest, ModelResponse, ToolReturnPart

__all__ = ["Conversation"]


def _is_returns(message: Message) -> bool:
    """A request made only of tool return records."""
    return isinstance(message, ModelRequest) and bool(message.parts) and all(
        isinstance(p, ToolReturnPart) for p in message.parts
    )


@dataclass
class Conversation:
    """The run's messages, in order, and what keeps its calls paired with their returns."""

    messages: list[Message] = field(default_factory=list[Message])
    """The canonical history (the `messages` query, the result's, the next request's)."""
    _paired: tuple[list[Message], Counter[str]] | None = field(default=None, repr=False)
    """A prefix of `messages` without unpaired calls, and the returns its calls left unused."""

    @staticmethod
    def new_id() -> str:
        """A fresh deterministic id (for messages and missing tool call ids)."""
        return workflow.uuid4().hex[:16]

    def append(self, message: Message) -> Message:
        """Append to the canonical history, giving the message an id if it has none."""
        if not message.id:
            message = message.model_copy(update={"id": self.new_id()})
        self.messages.append(message)
        return message

    def close_unpaired(self, reason: str) -> None:
        """Give every tool call without a return a `not_executed` record (no unpaired calls).

        Counted per id, not as a set: a model may reuse an id in a later response
        (some providers number calls from `call_0` in every response), and that
        later call needs its own return.
        """
        # Called at every step: only the messages after the prefix found paired last time
        # are scanned (a paired prefix stays paired; its unused returns are carried over).
        start, returned = 0, Counter[str]()
        if self._paired is not None:
            prefix, surplus = self._paired
            if len(prefix) <= len(self.messages) and self.messages[:len(prefix)] == prefix:
                start, returned = len(prefix), Counter(surplus)
        returned.update(
            p.tool_call_id for m in self.messages[start:] if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)
        )
        groups: list[tuple[int, list[ToolReturnPart]]] = []
        for index, m in enumerate(self.messages[start:], start):
            missing: list[ToolReturnPart] = []
            for c in m.tool_calls if isinstance(m, ModelResponse) else []:
                if returned[c.tool_call_id] > 0:
                    returned[c.tool_call_id] -= 1
                else:
                    missing.append(ToolReturnPart(tool_name=c.tool_name, tool_call_id=c.tool_call_id,
                                                  content=reason, status="not_executed"))
            if missing:
                groups.append((index, missing))
        for index, missing in reversed(groups):  # from the end, so earlier indexes stay valid
            self._insert_returns(index, missing)
        self._paired = (list(self.messages), +returned)

    def release(self) -> None:
        """Empty the conversation in place (its execution has ended and carried it on)."""
        self.messages.clear()
        self._paired = None

    def record_returns(self, parts: list[ToolReturnPart]) -> None:
        """Record return records right after the response that made their calls.

        After its earlier returns, but before anything a hook added later (an
        `after_model` feedback message, say), so every call is answered next to
        where it was made, as providers require.
        """
        ids = {p.tool_call_id for p in parts}
        for index in range(len(self.messages) - 1, -1, -1):
            m = self.messages[index]
            if isinstance(m, ModelResponse) and any(c.tool_call_id in ids for c in m.tool_calls):
                self._insert_returns(index, parts)
                return
        self.append(ModelRequest(parts=list(parts)))

    def _insert_returns(self, response_index: int, parts: list[ToolReturnPart]) -> None:
        at = response_index + 1
        while at < len(self.messages) and _is_returns(self.messages[at]):
            at += 1
        self.messages.insert(at, ModelRequest(id=self.new_id(), parts=list(parts)))
