"""Model requests by reference, so a run's history grows linearly, not with its square.

Sending every model activity the whole conversation writes the conversation
into the history once per step: O(steps²) bytes. Instead each model activity's
input carries only the messages this run has not sent before, plus a short
content reference for every message of the request, in order. The activity
worker resolves references from its cache; on a miss (another worker, a
restart) it asks the workflow itself with the `towline.request_messages`
query, which answers from the request kept in memory while the activity is in
flight. References are content hashes, so a projected or redacted copy of a
message is a different reference, and the full request is checked on arrival.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from towline.messages import Message

__all__ = ["REQUEST_QUERY", "message_ref", "RequestBook"]

REQUEST_QUERY = "towline.request_messages"


def message_ref(message: Message) -> str:
    """A content reference of a message (truncated SHA-256 of its canonical JSON)."""
    data = json.dumps(message.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()[:24]


@dataclass
class RequestBook:
    """Per run: which references the history already carries, and the requests in flight."""

    sent: set[str] = field(default_factory=lambda: set[str]())
    pending: dict[str, list[Message]] = field(default_factory=lambda: dict[str, list[Message]]())
    issued: int = 0

    def open(self, messages: list[Message]) -> tuple[str, list[str], list[Message]]:
        """Register a request; returns its key, its references and the not-yet-sent messages."""
        self.issued += 1
        key = str(self.issued)
        refs = [message_ref(m) for m in messages]
        new: list[Message] = []
        seen: set[str] = set()
        for m, r in zip(messages, refs, strict=True):
            if r not in self.sent and r not in seen:
                new.append(m)
                seen.add(r)
        self.pending[key] = list(messages)
        self.sent.update(refs)
        return key, refs, new

    def close(self, key: str) -> None:
        """Forget a request once its activity has finished."""
        self.pending.pop(key, None)
