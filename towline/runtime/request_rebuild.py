"""Model requests rebuilt from a history, the way a worker's request cache assembles them.

A request inside an `AgentRun` travels by reference (`towline.runtime.request_chain`): `prev`
names the messages sent before by one chain key, `new` holds the messages after it
(inline, or the content reference of one sent before or too large to write twice).
`RequestRebuilder` follows a run's requests and responses in history order, keeping a
node per chain key (the key before it and the content reference of its message) and the
messages by content reference, so every key a later request names resolves to its
messages. Messages the history holds whole elsewhere (a run's input, its result) are
made known with `know`. Requests of the earlier protocols (inline messages, a reference
per message) are read too. Pure code.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.activities.io import ModelActivityInput
from towline.messages import Message, ModelResponse
from towline.runtime.request_chain import ROOT, RequestDefinitions, chain_key, content_ref
from towline.runtime.request_refs import message_ref

__all__ = ["RequestRebuilder", "Rebuilt"]


@dataclass(frozen=True)
class Rebuilt:
    """One request, rebuilt."""

    key: str | None
    """Its chain key (None: an earlier protocol, not chained)."""
    messages: list[Message] | None
    """Its messages, in order; None when one of them is not known (see `problem`)."""
    definitions: RequestDefinitions | None
    """Its tools and settings (None: named by a hash never sent inline)."""
    problem: str | None = None


class RequestRebuilder:
    """Chain keys and messages of the requests seen so far."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str]] = {}
        """Chain key -> (the key before it, the content reference of the message after it)."""
        self.refs: dict[str, Message] = {}
        self.legacy: dict[str, Message] = {}
        """Messages by `towline.runtime.request_refs.message_ref` (the earlier protocol)."""
        self.defs: dict[str, RequestDefinitions] = {}

    def know(self, messages: list[Message]) -> None:
        """Messages the history holds whole, so references to them resolve."""
        for m in messages:
            self.refs.setdefault(content_ref(m), m)
            self.legacy.setdefault(message_ref(m), m)

    def messages_of(self, key: str) -> list[Message] | None:
        """The messages of chain `key` (None if one is not known)."""
        out: list[Message] = []
        while key != ROOT:
            node = self.nodes.get(key)
            message = self.refs.get(node[1]) if node is not None else None
            if node is None or message is None:
                return None
            out.append(message)
            key = node[0]
        out.reverse()
        return out

    def request(self, inp: ModelActivityInput) -> Rebuilt:
        """The request a model activity's input makes (and remember its chain)."""
        chain = inp.chain
        if chain is None:
            return self._unchained(inp)
        if chain.definitions is not None:
            self.defs[chain.defs] = chain.definitions
        key = chain.prev
        for item in chain.new:
            ref = item if isinstance(item, str) else content_ref(item)
            if not isinstance(item, str):
                self.refs.setdefault(ref, item)
            after = chain_key(key, ref)
            self.nodes.setdefault(after, (key, ref))
            key = after
        messages = self.messages_of(key)
        problem = None if messages is not None else (
            "a message it names is not in the history whole (a large tool result of a run "
            "that has not ended, or a message a hook rewrote)")
        return Rebuilt(key, messages, self.defs.get(chain.defs), problem)

    def answered(self, key: str, response: ModelResponse) -> None:
        """The response to the request of chain `key`: the next request may name it."""
        ref = content_ref(response)
        self.refs.setdefault(ref, response)
        self.nodes.setdefault(chain_key(key, ref), (key, ref))

    def _unchained(self, inp: ModelActivityInput) -> Rebuilt:
        definitions = RequestDefinitions(tools=inp.tools, output_tools=inp.output_tools,
                                         settings=inp.settings, output_mode=inp.output_mode,
                                         output_schema=inp.output_schema)
        self.know(inp.messages)
        if inp.message_refs is None:
            return Rebuilt(None, list(inp.messages), definitions)
        found = [self.legacy.get(r) for r in inp.message_refs]
        if any(m is None for m in found):
            return Rebuilt(None, None, definitions, "a message it names is not in the history")
        return Rebuilt(None, [m for m in found if m is not None], definitions)
