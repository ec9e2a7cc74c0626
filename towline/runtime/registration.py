"""Idempotent registration of towline's search attributes in a Temporal namespace.

A workflow that upserts an unregistered search attribute fails its workflow task
over and over, so workers, the embedded dev server and the tests register
``towline.runtime.search_attributes.ALL_KEYS`` before any run starts. Registration is
safe to repeat and to race: keys already present are skipped, and an
``ALREADY_EXISTS`` answer from a concurrent registrant is tolerated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping

import temporalio.client
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from towline.runtime.search_attributes import ALL_KEYS, SQL_VISIBILITY_KEYS

_log = logging.getLogger("towline")

_OPTIONAL = frozenset(k.name for k in ALL_KEYS) - frozenset(k.name for k in SQL_VISIBILITY_KEYS)
"""Keys a namespace on SQL visibility has no room for: registered where possible, else skipped."""

__all__ = [
    "unregistered_attribute",
    "SearchAttributeTypeConflict",
    "register_search_attributes",
    "registered_search_attributes",
    "AttributeCache",
    "ATTRIBUTE_CACHE",
    "CACHE_TTL",
]


def unregistered_attribute(error: RPCError) -> bool:
    """A start refused because a search attribute is not registered in the namespace."""
    return (error.status == RPCStatusCode.INVALID_ARGUMENT
            and "search attribute" in error.message.lower())

_Key = SearchAttributeKey[str] | SearchAttributeKey[int]


class SearchAttributeTypeConflict(RuntimeError):
    """A towline search attribute name is registered with a different type.

    Upserts of that attribute would be rejected, so this is reported loudly rather
    than skipped: an operator has to remove or rename the conflicting attribute.
    """


def _expected_types(keys: Iterable[_Key]) -> dict[str, IndexedValueType.ValueType]:
    """Map each key's name to the protobuf indexed value type the server reports."""
    return {key.name: IndexedValueType.ValueType(int(key.indexed_value_type)) for key in keys}


async def _list_custom(
    client: temporalio.client.Client, namespace: str
) -> Mapping[str, IndexedValueType.ValueType]:
    """The custom search attributes currently registered in ``namespace``, by name."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace), retry=True
    )
    return dict(response.custom_attributes)


def _check_conflicts(
    present: Mapping[str, IndexedValueType.ValueType],
    expected: Mapping[str, IndexedValueType.ValueType],
) -> None:
    """Raise ``SearchAttributeTypeConflict`` if any expected name exists with another type."""
    for name, wanted in expected.items():
        have = present.get(name)
        if have is not None and have != wanted:
            raise SearchAttributeTypeConflict(
                f"search attribute {name!r} is registered as {IndexedValueType.Name(have)}, "
                f"towline needs {IndexedValueType.Name(wanted)}"
            )


def _no_room(err: RPCError) -> bool:
    """The namespace has no slot left for another attribute of that type (SQL visibility)."""
    return err.status == RPCStatusCode.INVALID_ARGUMENT and "cannot have more than" in err.message


async def _add(
    client: temporalio.client.Client,
    namespace: str,
    attributes: Mapping[str, IndexedValueType.ValueType],
) -> bool:
    """Add ``attributes``; return False if the server says some already exist (a race) or
    that a type has no room left (then they are added one by one, see below)."""
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(search_attributes=attributes, namespace=namespace),
            retry=True,
        )
    except RPCError as err:
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            return False
        if _no_room(err) and len(attributes) > 1:
            return False
        if _no_room(err):
            _log.info("search attribute %s not registered in %r: %s (towline runs without "
                         "it)", next(iter(attributes)), namespace, err.message)
            return True
        raise
    return True


async def register_search_attributes(
    client: temporalio.client.Client, namespace: str | None = None
) -> None:
    """Register every key of ``towline.runtime.search_attributes.ALL_KEYS`` in ``namespace``.

    ``namespace`` defaults to the client's namespace. Keys already registered with the
    right type are left alone, so calling this on every worker start is cheap and
    idempotent. A key the namespace has no room for (SQL visibility holds three Int
    attributes: ``TowlineCostMicros`` does not fit) is skipped with a warning; the workflow
    never upserts an unregistered key. Raises ``SearchAttributeTypeConflict`` if a name is
    taken by another type,
    and ``temporalio.service.RPCError`` for other server errors (e.g. permission denied).
    """
    ns = namespace if namespace is not None else client.namespace
    expected = _expected_types(ALL_KEYS)
    present = await _list_custom(client, ns)
    _check_conflicts(present, expected)
    missing = {name: kind for name, kind in expected.items() if name not in present}
    if not missing:
        return
    if await _add(client, ns, missing):
        return
    # Someone registered part of the batch concurrently: add what is still missing one
    # at a time, each tolerating ALREADY_EXISTS, then confirm the end state.
    present = await _list_custom(client, ns)
    _check_conflicts(present, expected)
    for name, kind in expected.items():
        if name not in present:
            await _add(client, ns, {name: kind})
    present = await _list_custom(client, ns)
    _check_conflicts(present, expected)
    still_missing = sorted(name for name in expected if name not in present and name not in _OPTIONAL)
    if still_missing:
        raise RuntimeError(f"search attributes not registered in {ns!r}: {still_missing}")


async def registered_search_attributes(
    client: temporalio.client.Client, namespace: str | None = None
) -> frozenset[str]:
    """Names of the towline search attributes registered (with the right type) in ``namespace``.

    The workflow upserts only these keys, so a namespace where registration was not
    possible still runs agents, just without those attributes.
    """
    ns = namespace if namespace is not None else client.namespace
    expected = _expected_types(ALL_KEYS)
    present = await _list_custom(client, ns)
    return frozenset(name for name, kind in expected.items() if present.get(name) == kind)


CACHE_TTL = 300.0
"""Seconds a worker trusts its answer to "which towline attributes are registered"."""


class AttributeCache:
    """A worker process's answer to "which towline attributes are registered", per namespace.

    Every run starts by asking (the `towline.runtime.search_attributes` local activity). Asking
    the server each time cost two operator RPCs per run, most of the server's extra
    work when many short runs start at once; the answer changes only when an operator
    registers (or removes) an attribute. So a worker registers once (`TowlinePlugin`
    does so before it polls, or the first run does) and answers from here, asking the
    server again after `CACHE_TTL` seconds: an attribute registered later is used by
    runs started after that. Only names the server listed as registered with the right
    type are ever returned, so an unregistered attribute is never upserted (one removed
    by an operator is noticed within the TTL; a run upserting it meanwhile would have
    failed under the per-run check too, which answered only at the run's start).
    Concurrent misses share one refresh.
    """

    def __init__(self, ttl: float = CACHE_TTL) -> None:
        self.ttl = ttl
        self._entries: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}
        self._registered: set[tuple[str, str]] = set()
        self._pending: dict[tuple[int, str, str], asyncio.Future[frozenset[str]]] = {}
        self.refreshes = 0
        """Times the server was asked (for tests and the benchmark)."""

    @staticmethod
    def _key(client: temporalio.client.Client, namespace: str) -> tuple[str, str]:
        return (client.service_client.config.target_host, namespace)

    def put(self, client: temporalio.client.Client, namespace: str, names: frozenset[str]) -> None:
        """Record the registered names (e.g. right after registering them)."""
        key = self._key(client, namespace)
        self._registered.add(key)
        self._entries[key] = (time.monotonic(), names)

    def peek(self, client: temporalio.client.Client, namespace: str) -> frozenset[str] | None:
        """The cached answer, if any (fresh or not), without asking the server."""
        entry = self._entries.get(self._key(client, namespace))
        return entry[1] if entry is not None else None

    def clear(self) -> None:
        """Forget every answer (tests)."""
        self._entries.clear()
        self._registered.clear()

    async def get(self, client: temporalio.client.Client, namespace: str) -> frozenset[str]:
        """The registered towline attributes, registering them first if this process never did."""
        key = self._key(client, namespace)
        entry = self._entries.get(key)
        if entry is not None and time.monotonic() - entry[0] < self.ttl:
            return entry[1]
        flight = (id(asyncio.get_running_loop()), *key)
        pending = self._pending.get(flight)
        if pending is None:
            pending = asyncio.ensure_future(self._refresh(client, namespace, key))
            self._pending[flight] = pending
            pending.add_done_callback(lambda _: self._pending.pop(flight, None))
        return await asyncio.shield(pending)

    async def register(self, client: temporalio.client.Client, namespace: str) -> frozenset[str]:
        """Register the towline attributes (idempotently; a worker does so as it starts) and
        keep the answer. Raises if the server cannot even list them."""
        return await self._refresh(client, namespace, self._key(client, namespace), register=True)

    async def _refresh(
        self, client: temporalio.client.Client, namespace: str, key: tuple[str, str],
        register: bool = False,
    ) -> frozenset[str]:
        self.refreshes += 1
        if register or key not in self._registered:
            try:
                await register_search_attributes(client, namespace)
            except Exception as e:  # noqa: BLE001 - a namespace may forbid operator calls
                _log.warning("could not register towline search attributes: %s", e)
            self._registered.add(key)
        names = await registered_search_attributes(client, namespace)
        self._entries[key] = (time.monotonic(), names)
        return names


ATTRIBUTE_CACHE = AttributeCache()
"""The worker process's cache (one per process: workers of one process share it)."""
