"""A worker's side of `towline.runtime.request_chain`: messages held by chain key, fetched on a miss.

`RequestCache.resolve` turns a `ChainedRequest` into the full messages and
definitions: from what this worker holds (messages by chain key and by content
reference, definitions by hash), or, for whatever it lacks, from the workflow
through the `towline.model_request_input` query. Either way the result is checked
against the request's chain key before a model sees it. Bounded: the oldest
entries go first; an entry evicted is fetched again if needed.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable

from temporalio.exceptions import ApplicationError

from towline.messages import Message
from towline.runtime.request_chain import (
    ROOT,
    ChainedRequest,
    RequestAnswer,
    RequestDefinitions,
    RequestQuery,
    chain_key,
    chain_keys,
    content_ref,
)

__all__ = ["RequestCache", "NODES", "LISTS", "LIST_ITEMS", "MISMATCH"]

NODES = 100_000
"""Messages a worker holds by chain key (and by content reference)."""
LISTS = 32
"""Whole requests a worker keeps assembled (the latest ones: most requests extend one)."""
LIST_ITEMS = 64_000
"""Messages the assembled requests may name in all (the newest is always kept): a long run's
requests each name its whole conversation, and every name is one more reference for Python's
garbage collector to follow in each full collection (`towline.runtime.heap`). An evicted list is
assembled again from the messages held by key."""
MISMATCH = "RequestMismatch"
"""Failure type of a request whose messages do not match its key (never expected)."""

Ask = Callable[[RequestQuery], Awaitable[RequestAnswer]]


class RequestCache:
    """Messages by chain key, so that a request names what the worker already holds."""

    def __init__(self, nodes: int | None = None, lists: int | None = None) -> None:
        self.max_nodes = NODES if nodes is None else nodes
        self.max_lists = LISTS if lists is None else lists
        self._nodes: dict[str, tuple[str, Message]] = {}
        self._refs: dict[str, Message] = {}
        self._lists: OrderedDict[str, list[Message]] = OrderedDict()
        self._defs: OrderedDict[str, RequestDefinitions] = OrderedDict()
        self._recent: OrderedDict[str, deque[str]] = OrderedDict()
        self.queries = 0
        """Requests this worker had to complete from the workflow (misses)."""

    async def resolve(
        self, req: ChainedRequest, run: str, ask: Ask
    ) -> tuple[list[Message], RequestDefinitions, str]:
        """The request's messages, definitions and chain key; `ask` the workflow on a miss."""
        if req.definitions is not None:
            self._keep_defs(req.defs, req.definitions)
        refs = [item if isinstance(item, str) else content_ref(item) for item in req.new]
        key = req.prev
        for ref in refs:
            key = chain_key(key, ref)
        base = self._messages(req.prev)
        new = [item if not isinstance(item, str) else self._refs.get(item) for item in req.new]
        definitions = self._defs.get(req.defs)
        if base is not None and definitions is not None and all(m is not None for m in new):
            messages = [*base, *(m for m in new if m is not None)]
            self._store(req.prev, [m for m in new if m is not None], refs)
        else:
            messages, definitions = await self._fetch(req, key, run, ask)
        self._lists[key] = messages
        self._lists.move_to_end(key)
        self._trim_lists()
        self._note(run, key)
        return messages, definitions, key

    def produced(self, key: str, messages: list[Message], response: Message, run: str) -> None:
        """Keep the response this worker produced for request `key`: the next request names it."""
        ref = content_ref(response)
        after = chain_key(key, ref)
        self._put(after, key, response, ref)
        self._lists[after] = [*messages, response]
        self._lists.move_to_end(after)
        self._trim_lists()
        self._note(run, after)

    async def _fetch(
        self, req: ChainedRequest, key: str, run: str, ask: Ask
    ) -> tuple[list[Message], RequestDefinitions]:
        self.queries += 1
        have = [k for k in reversed(self._recent.get(run, ())) if self._messages(k) is not None]
        answer = await ask(RequestQuery(n=req.n, have=have))
        none: list[Message] = []
        base = none if answer.after == ROOT else (
            self._messages(answer.after) if answer.after in have else None)
        if base is None and answer.after in have:  # evicted while we asked: ask for all of it
            answer = await ask(RequestQuery(n=req.n))
            base = none if answer.after == ROOT else None
        keys = chain_keys(answer.after, answer.messages)
        if base is None or (keys[-1] if keys else answer.after) != key or \
                answer.definitions.ref() != req.defs:
            raise ApplicationError("model request messages do not match their key",
                                   type=MISMATCH, non_retryable=True)
        self._keep_defs(req.defs, answer.definitions)
        self._store(answer.after, answer.messages, None, keys)
        return [*base, *answer.messages], answer.definitions

    def _messages(self, key: str) -> list[Message] | None:
        """The messages of chain `key`, if this worker holds them all."""
        if key == ROOT:
            return []
        found = self._lists.get(key)
        if found is not None:
            self._lists.move_to_end(key)
            return found
        tail: list[Message] = []
        while key != ROOT:
            assembled = self._lists.get(key)
            if assembled is not None:
                return [*assembled, *reversed(tail)]
            node = self._nodes.get(key)
            if node is None:
                return None
            key = node[0]
            tail.append(node[1])
        return list(reversed(tail))

    def _store(self, prev: str, messages: list[Message], refs: list[str] | None,
               keys: list[str] | None = None) -> None:
        if refs is None:
            refs = [content_ref(m) for m in messages]
        key = prev
        for i, (m, ref) in enumerate(zip(messages, refs, strict=True)):
            after = keys[i] if keys is not None else chain_key(key, ref)
            self._put(after, key, m, ref)
            key = after

    def _put(self, key: str, prev: str, message: Message, ref: str) -> None:
        self._nodes[key] = (prev, message)
        self._refs[ref] = message
        for store in (self._nodes, self._refs):
            while len(store) > self.max_nodes:
                del store[next(iter(store))]  # the oldest entry

    def _keep_defs(self, ref: str, definitions: RequestDefinitions) -> None:
        self._defs[ref] = definitions
        self._defs.move_to_end(ref)
        while len(self._defs) > 1_000:
            self._defs.popitem(last=False)

    def _trim_lists(self) -> None:
        items = sum(len(m) for m in self._lists.values())
        while len(self._lists) > self.max_lists or (len(self._lists) > 1 and items > LIST_ITEMS):
            items -= len(self._lists.popitem(last=False)[1])

    def _note(self, run: str, key: str) -> None:
        recent = self._recent.get(run)
        if recent is None:
            recent = self._recent[run] = deque(maxlen=4)
        recent.append(key)
        self._recent.move_to_end(run)
        while len(self._recent) > 1_000:
            self._recent.popitem(last=False)
