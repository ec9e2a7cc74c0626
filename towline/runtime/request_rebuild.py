"""Model requests rebuilt from a history, the way a worker's request cache assembles them.

A request inside an `AgentRun` travels by reference (`towline.runtime.request_chain`): `prev`
names the messages sent before by one chain key, `new` holds the messages after it
(inline, or the content reference of one sent before or too large to write twice).
`RequestRebuilder` follows a run's requests and responses in history order, keeping a
node per chain key (the key before it and the content reference of its message) and the
messages by content reference, so every key a later request names resolves to its
messages. Messages the history holds whole elsewhere (a run's input, its result) are
made known with `know`. A request made outside an `AgentRun` has its messages inline.

A message the history names only by its reference is kept as that reference (a `str`, a
placeholder), and a key whose earlier messages the history never showed leaves the
request's head unknown (`Rebuilt.missing_prefix`): `Rebuilt.messages` is then the tail it
holds. A reader that needs every message takes neither (`UNRESOLVED`, `UNKNOWN_PREFIX` say
why; `towline.replay.records.RecordedRequest.resolved`). Pure code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from towline.activities.io import ModelActivityInput
from towline.messages import Message, ModelResponse
from towline.runtime.request_chain import ROOT, RequestDefinitions, chain_key, content_ref

__all__ = ["RequestRebuilder", "Rebuilt", "Sent", "UNRESOLVED", "UNKNOWN_PREFIX"]

Sent = Message | str
"""A message of a rebuilt request: the message, or (a placeholder) the content reference of
one the history names only by that reference."""

UNRESOLVED = ("a message it names is not in the history whole (a large tool result of a run "
              "that has not ended, or a message a hook rewrote)")
"""Why a request's messages are unknown when one of them is only a reference."""
UNKNOWN_PREFIX = "its earlier messages are not in the history (named by a key it never showed)"
"""Why they are unknown when the chain key its messages follow was never seen."""


@dataclass(frozen=True)
class Rebuilt:
    """One request, rebuilt."""

    key: str | None
    """Its chain key (None: an earlier protocol, not chained)."""
    messages: list[Sent]
    """Its messages, in order, a placeholder for each one known only by reference; only the
    tail the history holds when `missing_prefix`."""
    definitions: RequestDefinitions | None
    """Its tools and settings (None: named by a hash never sent inline)."""
    missing_prefix: bool = False
    """Its earliest messages are not in the history at all."""


class RequestRebuilder:
    """Chain keys and messages of the requests seen so far."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str]] = {}
        """Chain key -> (the key before it, the content reference of the message after it)."""
        self.refs: dict[str, Message] = {}
        self.defs: dict[str, RequestDefinitions] = {}

    def know(self, messages: Sequence[Message]) -> None:
        """Messages the history holds whole, so references to them resolve."""
        for m in messages:
            self.refs.setdefault(content_ref(m), m)

    def walk(self, key: str) -> tuple[list[Sent], bool]:
        """The messages of chain `key` (placeholders for those known only by reference), and
        whether its earliest ones are missing altogether (only the tail is returned)."""
        out: list[Sent] = []
        seen: set[str] = set()
        while key != ROOT:
            node = self.nodes.get(key)
            if node is None or key in seen:
                out.reverse()
                return out, True
            seen.add(key)
            key, ref = node
            out.append(self.refs.get(ref, ref))
        out.reverse()
        return out, False

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
        messages, missing = self.walk(key)
        return Rebuilt(key, messages, self.defs.get(chain.defs), missing)

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
        return Rebuilt(None, list(inp.messages), definitions)
