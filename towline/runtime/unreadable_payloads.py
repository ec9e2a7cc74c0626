"""Stored payloads that can never be read become a typed placeholder, not a stuck run.

A payload store reference arrives from the history, which any client of the
namespace writes: a run's start input, a `send` update's argument, a `cancel`
signal's. The SDK resolves references while it decodes a workflow activation,
before any towline code runs, so a reference that cannot be read used to fail
the workflow *task*, and Temporal retried it forever: the run stuck, and a
session that received such an update or signal wedged for good.

`TolerantStorage` (the `ExternalStorage` a `PayloadStore` configures) tells the
two kinds of failure apart:

- one that may pass (the store out of reach: a directory gone, a network error)
  is raised as before, and Temporal retries the task until the store is back;
- one that never will (a reference of the wrong shape or with `..`, a driver this
  worker does not have, a reference that is not one) becomes a placeholder payload of
  encoding `towline/unreadable` naming the reason;
- a payload the store does not hold (or holds other bytes of) becomes one at once too,
  marked final once it has been missing for `missing_after` seconds: an update or a
  signal carrying it is refused at once, with the reason (retrying cannot help a third
  party's reference), while a start input that is not final yet fails its workflow task,
  so Temporal retries it until the store has it (a store being mounted again) or
  `missing_after` has passed.

No payload converter reads that encoding, so a signal carrying one is dropped and
an update is refused (the SDK's own handling of arguments it cannot decode), while
the run goes on; `AgentRun` decodes its start input itself and ends the run
`InvalidRunInput` with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, cast

from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

__all__ = [
    "UNREADABLE_ENCODING",
    "REASON_KEY",
    "MissingPayload",
    "InvalidPayloadReference",
    "unreadable",
    "unreadable_reason",
    "pending",
    "TolerantDriver",
    "TolerantStorage",
    "without_store",
]

_NO_STORE = ("stored payload unreadable: it is in a payload store, and this worker has none "
             "(start the workers with the clients' store: towline worker --payload-store URL, "
             "or TowlinePlugin(payload_store=...))")

UNREADABLE_ENCODING = b"towline/unreadable"
"""The encoding of a placeholder for a stored payload that can never be read."""
REASON_KEY = "towline-unreadable"
"""The placeholder's metadata key holding the reason (UTF-8)."""
_FINAL_KEY = "towline-unreadable-final"


class MissingPayload(LookupError):
    """The store is reachable but does not hold the payload: it never will."""


class InvalidPayloadReference(ValueError):
    """A stored-payload reference no store could ever resolve (a key of the wrong shape).

    Retrying cannot help, unlike a payload not found (yet) or a store out of reach.
    """


def unreadable(reason: str, *, final: bool = True) -> Payload:
    """The placeholder for a payload that can never be read, naming why (`final` off: one the
    store does not hold yet, which a start input waits for; see `pending`)."""
    text = reason[:500].encode("utf-8", errors="replace")
    return Payload(metadata={"encoding": UNREADABLE_ENCODING, REASON_KEY: text,
                             _FINAL_KEY: b"1" if final else b"0"}, data=text)


def pending(payload: Payload) -> bool:
    """Whether `payload` is the placeholder of a payload missing for less than `missing_after`:
    a start input then fails its workflow task, so Temporal retries it until the payload is
    there (a store being mounted) or `missing_after` has passed."""
    return (payload.metadata.get("encoding") == UNREADABLE_ENCODING
            and payload.metadata.get(_FINAL_KEY) == b"0")


def unreadable_reason(payload: Payload) -> str | None:
    """The reason of a placeholder (None for any other payload)."""
    if payload.metadata.get("encoding") != UNREADABLE_ENCODING:
        return None
    return payload.metadata.get(REASON_KEY, b"").decode("utf-8", errors="replace")


def _status(error: BaseException) -> Any:
    """An HTTP status or error code an S3 or GCS client attached to its error."""
    response: Any = getattr(error, "response", None)
    if isinstance(response, dict):
        details = cast(dict[str, Any], response).get("Error")
        return cast(dict[str, Any], details).get("Code") if isinstance(details, dict) else None
    return getattr(error, "status", None) or getattr(error, "code", None)


def _missing(error: BaseException) -> bool:
    """Whether the store answered that it does not hold the payload (or other bytes)."""
    return isinstance(error, MissingPayload) or str(_status(error)) in (
        "NoSuchKey", "NotFound", "404")


class TolerantDriver(StorageDriver):
    """A store's driver whose reads that can never succeed return a placeholder.

    A malformed reference is final at once. A payload the store does not hold is a
    placeholder at once, final once it has been missing for `missing_after` seconds: a
    store that is being mounted again, or a bucket's replica catching up, looks the same
    for a while, and a start input's workflow task is retried meanwhile (`pending`)."""

    def __init__(self, driver: StorageDriver, missing_after: float = 60.0) -> None:
        self.inner = driver
        self.missing_after = missing_after
        self._first_missing: dict[str, float] = {}

    def name(self) -> str:
        return self.inner.name()

    def type(self) -> str:
        return self.inner.type()

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await self.inner.store(context, payloads)

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        try:
            return await self.inner.retrieve(context, claims)
        except Exception as e:
            if len(claims) == 1:
                if isinstance(e, InvalidPayloadReference):
                    return [unreadable(f"stored payload unreadable: {e}")]
                if _missing(e):  # a placeholder at once: an update or signal is refused now
                    return [unreadable(f"stored payload unreadable: {e}",
                                       final=self._missing_for_good(claims[0]))]
                raise
        # One of several failed: read them one by one, so only that one is a placeholder.
        return [(await self.retrieve(context, [claim]))[0] for claim in claims]

    def _missing_for_good(self, claim: StorageDriverClaim) -> bool:
        key = repr(sorted(claim.claim_data.items()))
        now = time.monotonic()
        first = self._first_missing.setdefault(key, now)
        if len(self._first_missing) > 10_000:  # bounded: forget the oldest
            self._first_missing.pop(next(iter(self._first_missing)))
        return now - first >= self.missing_after


class _NoSuchDriver(StorageDriver):
    """Stands for a driver this worker does not have (a reference from another store)."""

    def __init__(self, name: str, reason: str | None = None) -> None:
        self._name = name
        self._reason = reason

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return "towline.missing"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        raise RuntimeError(f"payload store driver {self._name!r} is not configured here")

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        reason = self._reason or (
            f"stored payload unreadable: it is in a store of driver {self._name[:80]!r}, "
            "which this worker does not have")
        return [unreadable(reason) for _ in claims]


@dataclasses.dataclass(frozen=True)
class TolerantStorage(ExternalStorage):
    """`ExternalStorage` whose never-readable references become placeholders (see above)."""

    no_store: bool = False
    """This process has no payload store: it stores nothing, and reads every reference as a
    placeholder saying so."""

    def _get_driver_by_name(self, name: str) -> StorageDriver:
        if self.no_store:
            return _NoSuchDriver(name, _NO_STORE)
        try:
            return super()._get_driver_by_name(name)
        except ValueError:
            return _NoSuchDriver(name)

    def _decode_reference(self, payload: Payload) -> ExternalStorageReference | None:
        try:
            return super()._decode_reference(payload)
        except Exception:  # noqa: BLE001 - a forged reference: left as it is, undecodable
            return None


def without_store() -> TolerantStorage:
    """The external storage of a process with no payload store: it never stores a payload,
    and a reference it meets (a client's that has one) becomes a placeholder that says so,
    where the SDK would fail the workflow task for good (`TMPRL1105`)."""
    return TolerantStorage(drivers=[_NoSuchDriver("towline.none", _NO_STORE)],
                           payload_size_threshold=2**62, no_store=True)
