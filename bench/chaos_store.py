"""The chaos bench's payload store: a `file://` directory that goes away and comes back.

The bench (`bench/chaos.py`), its client and every worker share one store, named by a
symbolic link (`<out>/store`) to the real directory (`<out>/payloads`). An outage points the
link at a directory that does not exist, in one atomic rename, as an unmounted network share
would: every read and write of a stored payload fails (`FileStorageDriver` cannot even
recreate the directory through the dangling link) until the link points back. Nothing
stored is touched, so a run that loses anything lost it through towline or Temporal.

`CountingStore` is the `PayloadStore` every process uses: the same driver, and each failed
store or read logged to `store.log` (one JSON line, pid and time), so the report can show
the outage was felt. `references` and `check_references` read the store references a
history holds and check each one resolves to its payload, whole. `append_log` and `read_log`
write and read the bench's JSON-line logs (this store's, the tools', the workers' attempts).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.message import Message as Proto
from histories import REFERENCE, payloads_in
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from towline.storage.payload_store import PayloadStore

__all__ = ["THRESHOLD", "CountingStore", "Outage", "references", "check_references",
           "append_log", "read_log"]

THRESHOLD = 1024
"""Payloads of at least this many bytes go to the bench's store (towline's default is 64 KiB:
lower here, so that ordinary runs of the bench reach it)."""
_T = TypeVar("_T")


def append_log(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, written with a single `O_APPEND` write (atomic between processes)."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_log(folder: Path, name: str) -> list[dict[str, Any]]:
    """The JSON lines of one of the bench's logs (empty if it does not exist)."""
    path = folder / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _Logged(StorageDriver):
    """A driver that logs each failed operation of the driver it wraps, then re-raises."""

    def __init__(self, inner: StorageDriver, log: Path) -> None:
        self.inner = inner
        self.log = log

    def name(self) -> str:
        return self.inner.name()

    def type(self) -> str:
        return self.inner.type()

    async def _logged(self, op: str, count: int, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except Exception as e:
            append_log(self.log, {"op": op, "payloads": count, "pid": os.getpid(),
                                  "error": f"{type(e).__name__}: {str(e)[:200]}", "t": time.time()})
            raise

    async def store(self, context: StorageDriverStoreContext,
                    payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        return await self._logged("store", len(payloads), self.inner.store(context, payloads))

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        return await self._logged("retrieve", len(claims), self.inner.retrieve(context, claims))


@dataclass(frozen=True)
class CountingStore(PayloadStore):
    """The bench's `file://` store: towline's driver, its failures logged to `log`."""

    log: str = ""
    """The file failed operations are appended to (`<effects>/store.log`)."""

    def driver(self) -> StorageDriver:
        inner = super().driver()
        return _Logged(inner, Path(self.log)) if self.log else inner


class Outage:
    """The store's link, and switching it off (to nowhere) and on (back to the payloads)."""

    def __init__(self, out: Path) -> None:
        self.link = out / "store"
        self.payloads = out / "payloads"
        self.nowhere = out / "payloads-unmounted"
        self.payloads.mkdir(parents=True, exist_ok=True)
        self._point(self.payloads)

    @property
    def url(self) -> str:
        """The store's URL, as the client and the workers are given it."""
        return f"file://{self.link}"

    @property
    def down(self) -> bool:
        return Path(os.readlink(self.link)) != self.payloads

    def _point(self, target: Path) -> None:
        tmp = self.link.with_name(f".store.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, self.link)  # atomic: no reader sees the link missing

    def stop(self) -> None:
        """Make the store unreachable: every read and write fails until `start`."""
        self._point(self.nowhere)

    def start(self) -> None:
        """Make the store reachable again, as it was."""
        self._point(self.payloads)

    def failures(self, folder: Path) -> list[dict[str, Any]]:
        """The failed store operations the processes logged (`store.log` in `folder`)."""
        return read_log(folder, "store.log")

    def files(self) -> int:
        """Payloads in the store."""
        return sum(1 for p in self.payloads.glob("??/*") if not p.name.startswith("."))


def references(events: Iterable[Proto]) -> list[dict[str, str]]:
    """The claims (`key`, `sha256`) of every store reference in a history's events."""
    found: list[dict[str, str]] = []
    for event in events:
        for payload in payloads_in(event):
            if payload.metadata.get("messageType") == REFERENCE and payload.external_payloads:
                found.append(dict(json.loads(payload.data).get("claimData", {})))
    return found


def check_references(claims: Iterable[dict[str, str]], payloads: Path) -> list[str]:
    """What is wrong with the stored payloads `claims` name: missing, or not whole."""
    wrong: list[str] = []
    for claim in claims:
        key, digest = claim.get("key", ""), claim.get("sha256", "")
        path = payloads / key
        if not path.is_file():
            wrong.append(f"stored payload {key} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            wrong.append(f"stored payload {key} does not match its hash")
    return wrong
