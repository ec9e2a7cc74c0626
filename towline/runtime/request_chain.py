"""Model requests of constant size: the messages a worker holds, named by one chained key.

A model request repeats the whole conversation. Writing it into every model
activity's input would make a run's history grow with the square of its length;
sending a reference per message (towline's first answer) still
grew by one reference per message per step. Here a request names everything a
worker already holds with one key, so its size does not depend on the
conversation's length:

- Every list of messages has a *chain key*: `key(m1..mn) = H(key(m1..mn-1) +
  ref(mn))`, with `key() = ""` and `ref(m)` a hash of the message's JSON. A
  list's key depends only on its messages, so any worker can compute and check it.
- A request (`ChainedRequest`) carries `prev`, the key of the longest prefix of
  its messages the run has sent before (or that came back as a model response),
  and `new`, the messages after it: inline, or the content reference of one the
  run sent before in another arrangement, or of one too large to write into the
  history twice (`INLINE_LIMIT`: a big tool result is in the history once, as the
  tool's result; the worker fetches it). Tool definitions and settings travel by
  hash (`defs`), inline the first time an execution uses them.
- A worker keeps what it was sent (and the responses it produced) under their
  keys. On a miss (another worker served the last step, the worker restarted, it
  evicted the messages) it asks the workflow: the `towline.model_request_input`
  query answers from the request kept in memory while the activity is in flight,
  only the messages after a key the worker names (`RequestQuery.have`). Every
  answer is checked against the request's key before the model sees it.
- Continue-as-new carries the last key (`RequestChain`), so a new execution's
  first request is as small as any other.

Pure code (hashing only): runs inside the workflow and on activity workers.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from towline.messages import Message
from towline.options import ModelSettings, OutputMode
from towline.tools import ToolDefinition

__all__ = [
    "REQUEST_INPUT_QUERY",
    "ROOT",
    "INLINE_LIMIT",
    "content_ref",
    "chain_key",
    "chain_keys",
    "common_prefix",
    "RequestDefinitions",
    "ChainedRequest",
    "RequestQuery",
    "RequestAnswer",
    "RequestChain",
    "RequestBook",
]

REQUEST_INPUT_QUERY = "towline.model_request_input"
"""Query a model activity sends its workflow on a cache miss (`RequestQuery` -> `RequestAnswer`)."""
ROOT = ""
"""The chain key of no messages."""
_RECENT_CHAINS = 4
"""Chains a run remembers (its own requests, and e.g. a summariser's with other messages)."""
INLINE_LIMIT = 16 * 1024
"""A new message larger than this (a big tool result, say) is named by its content reference
rather than sent: the worker fetches it with the query, so the history holds it once (in
the tool's result), not twice."""


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()[:12]).decode()


def content_ref(message: Message) -> str:
    """The content reference of a message: 96 bits of SHA-256 of its JSON, base64url."""
    return _digest(message.model_dump_json().encode())


def _ref_and_size(message: Message) -> tuple[str, int]:
    data = message.model_dump_json().encode()
    return _digest(data), len(data)


def chain_key(prev: str, ref: str) -> str:
    """The key of a list whose last message has content reference `ref`, after `prev`."""
    return _digest(f"{prev}|{ref}".encode())


def chain_keys(prev: str, messages: Sequence[Message]) -> list[str]:
    """The key after each of `messages`, starting from the list keyed `prev`."""
    keys: list[str] = []
    for m in messages:
        prev = chain_key(prev, content_ref(m))
        keys.append(prev)
    return keys


def common_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many leading messages `a` and `b` share (by value; list compares run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RequestDefinitions(BaseModel):
    """What a request offers besides messages: tools, output tools and settings."""

    model_config = ConfigDict(frozen=True)

    tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """Function tools offered."""
    output_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """The structured-output tool, if any."""
    settings: ModelSettings = Field(default_factory=ModelSettings)
    """The request's settings."""
    output_mode: OutputMode = Field(default="tool", exclude_if=lambda v: v == "tool")
    """How structured output is asked for (`Agent.output_mode`)."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)
    """The output's JSON schema (`Agent.output_schema()`) in the `native` and `prompted` modes."""
    native_tools: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]],
                                               exclude_if=lambda v: not v)
    """The provider's own tools offered (`Agent.native_tools`), as JSON (`towline.native_tools.
    NATIVE_TOOLS` reads them: this module stays below the options it would otherwise import)."""

    def ref(self) -> str:
        """Their hash, which names them in later requests."""
        return _digest(self.model_dump_json().encode())


def _none(value: Any) -> bool:
    return value is None


class ChainedRequest(BaseModel):
    """A model request by reference (the `chain` of `towline.model_request`'s input)."""

    n: int
    """The request's number in this execution: names it for `towline.model_request_input`."""
    prev: str = ROOT
    """Key of the messages before `new`, which a worker may already hold ("": none)."""
    new: list[Message | str] = Field(default_factory=list[Message | str])
    """The messages after them: a message, or the `content_ref` of one sent before."""
    defs: str
    """`RequestDefinitions.ref()` of the request's tools and settings."""
    definitions: RequestDefinitions | None = Field(default=None, exclude_if=_none)
    """The definitions themselves, the first time this execution sends them."""


class RequestQuery(BaseModel):
    """The argument of `towline.model_request_input`."""

    n: int
    """The request."""
    have: list[str] = Field(default_factory=list[str])
    """Keys the asking worker holds: the answer may start after the longest one that is a
    prefix of the request."""


class RequestAnswer(BaseModel):
    """What `towline.model_request_input` answers: the request's messages after `after`."""

    after: str = ROOT
    """The key (one of `RequestQuery.have`, or "") the messages follow."""
    messages: list[Message]
    """The messages after it."""
    definitions: RequestDefinitions
    """The request's definitions."""


class RequestChain(BaseModel):
    """What continue-as-new carries so the next execution's first request stays small."""

    key: str
    """The key of the messages last sent (with the response that came back)."""
    length: int = Field(ge=0)
    """How many messages it covers."""


@dataclass
class _Chain:
    messages: list[Message]
    keys: list[str]
    """The key after each message."""
    sizes: list[int]
    """The JSON bytes of the messages up to and including each one."""


@dataclass
class _Pending:
    messages: list[Message]
    keys: list[str]
    definitions: RequestDefinitions
    chain: _Chain


@dataclass
class RequestBook:
    """Per execution (workflow side): the chains sent so far and the requests in flight."""

    chains: list[_Chain] = field(default_factory=lambda: list[_Chain]())
    pending: dict[int, _Pending] = field(default_factory=lambda: dict[int, _Pending]())
    sent: set[str] = field(default_factory=lambda: set[str]())
    """Content refs of messages sent inline (or answered) in this execution."""
    sent_defs: set[str] = field(default_factory=lambda: set[str]())
    issued: int = 0
    carried: RequestChain | None = None
    """The previous execution's last chain, not yet matched against a request."""

    def open(
        self, messages: Sequence[Message], definitions: RequestDefinitions
    ) -> tuple[ChainedRequest, int]:
        """Register a request; returns what the activity input carries, and the bytes its
        messages take inline (what a worker fetching them all would receive)."""
        self.issued += 1
        messages = list(messages)
        self._adopt_carried(messages)
        best: _Chain | None = None
        shared = 0
        for chain in self.chains:
            j = common_prefix(chain.messages, messages)
            if j > shared:
                best, shared = chain, j
        keys = best.keys[:shared] if best is not None else []
        sizes = best.sizes[:shared] if best is not None else []
        prev = keys[-1] if keys else ROOT
        new: list[Message | str] = []
        key, total = prev, sizes[-1] if sizes else 0
        for m in messages[shared:]:
            ref, size = _ref_and_size(m)
            key, total = chain_key(key, ref), total + size
            keys.append(key)
            sizes.append(total)
            new.append(ref if ref in self.sent or size > INLINE_LIMIT else m)
            self.sent.add(ref)
        chain = _Chain(messages, keys, sizes)
        self.chains = [chain, *(c for c in self.chains if c is not best)][:_RECENT_CHAINS]
        defs = definitions.ref()
        inline = defs not in self.sent_defs
        self.sent_defs.add(defs)
        self.pending[self.issued] = _Pending(messages, keys, definitions, chain)
        request = ChainedRequest(n=self.issued, prev=prev, new=new, defs=defs,
                                 definitions=definitions if inline else None)
        return request, total

    def answered(self, n: int, response: Message) -> None:
        """Extend request `n`'s chain with the response its worker produced (and keeps)."""
        pending = self.pending.get(n)
        if pending is None:
            return
        chain = pending.chain
        if chain.keys is not pending.keys:
            return  # already extended
        ref, size = _ref_and_size(response)
        # new lists: the pending request keeps answering queries with its own messages
        chain.messages = [*chain.messages, response]
        chain.keys = [*chain.keys, chain_key(pending.keys[-1] if pending.keys else ROOT, ref)]
        chain.sizes = [*chain.sizes, (chain.sizes[-1] if chain.sizes else 0) + size]
        self.sent.add(ref)

    def close(self, n: int) -> None:
        """Forget a request once its activity has finished."""
        self.pending.pop(n, None)

    def answer(self, query: RequestQuery) -> RequestAnswer:
        """The messages of in-flight request `query.n` after the longest key the worker has."""
        pending = self.pending.get(query.n)
        if pending is None:
            raise ValueError(f"no model request {query.n} is in flight")
        have = set(query.have)
        after, start = ROOT, 0
        for i in range(len(pending.keys) - 1, -1, -1):
            if pending.keys[i] in have:
                after, start = pending.keys[i], i + 1
                break
        return RequestAnswer(after=after, messages=pending.messages[start:],
                             definitions=pending.definitions)

    def release(self) -> None:
        """Forget every chain and request (the execution has ended: see `workflows.continuation.release`)."""
        self.chains.clear()
        self.pending.clear()
        self.sent.clear()

    def last_chain(self) -> RequestChain | None:
        """The chain to carry across continue-as-new (the most recent one)."""
        if self.chains and self.chains[0].keys:
            c = self.chains[0]
            return RequestChain(key=c.keys[-1], length=len(c.keys))
        return self.carried

    def _adopt_carried(self, messages: list[Message]) -> None:
        """The first request after continue-as-new: does it extend the carried chain?

        The carried key covers the previous execution's last request; it is trusted
        only if the same messages lead to it here (one hash per message, once).
        """
        carried, self.carried = self.carried, None
        if carried is None or carried.length == 0 or carried.length > len(messages):
            return
        prefix = messages[:carried.length]
        keys: list[str] = []
        sizes: list[int] = []
        key, total = ROOT, 0
        for m in prefix:
            ref, size = _ref_and_size(m)
            key, total = chain_key(key, ref), total + size
            keys.append(key)
            sizes.append(total)
        if key == carried.key:
            self.chains.insert(0, _Chain(prefix, keys, sizes))
