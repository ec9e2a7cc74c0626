"""External payload storage: large payloads in a blob store, a reference in the history.

Temporal refuses a payload over 2 MiB, and every payload a run writes stays in its
history. With a payload store, Temporal's external storage (`ExternalStorage` in
the data converter) puts every payload of at least `threshold` bytes into the
store and writes a small reference into the history instead; workers and clients
configured with the same store read it back transparently. Smaller payloads stay
inline, readable in the Temporal UI. The payload codec (encryption,
`towline.encryption.codec`) applies first, so the store only ever holds encrypted bytes.

A store is named by a URL:

- `file://DIR`: files under DIR (towline's own driver, `FileStorageDriver`); the
  embedded server (`towline dev`) uses `<state dir>/payloads` by default. Every
  worker and client must see the same directory (one machine, or a shared disk).
- `s3://BUCKET/PREFIX`: Amazon S3 or any S3-compatible server, through
  `temporalio.contrib.aws.s3driver` (extra `towline[s3]`); credentials, region
  and endpoint from the standard AWS configuration (`AWS_*`, `~/.aws`).
- `gs://BUCKET/PREFIX`: Google Cloud Storage through
  `temporalio.contrib.gcp.gcsdriver` (extra `towline[gcs]`); credentials from
  `GOOGLE_APPLICATION_CREDENTIALS` (`STORAGE_EMULATOR_HOST` for an emulator).

Stored payloads are content-addressed and never deleted by towline: keep them as
long as histories refer to them (a bucket lifecycle rule past your retention).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from towline.errors import ConfigurationError
from towline.runtime.unreadable_payloads import (
    InvalidPayloadReference,
    MissingPayload,
    TolerantDriver,
    TolerantStorage,
)

__all__ = [
    "PayloadStore",
    "FileStorageDriver",
    "InvalidPayloadReference",
    "STORE_ENV",
    "DEFAULT_THRESHOLD",
    "DEFAULT_MAX_PAYLOAD",
    "payload_store",
]

STORE_ENV = "TOWLINE_PAYLOAD_STORE"
"""Environment variable naming the store of CLI workers and clients (a URL, or `none`)."""
DEFAULT_THRESHOLD = 64 * 1024
"""Payloads of at least this many bytes are stored (smaller ones stay in the history)."""
DEFAULT_MAX_PAYLOAD = 50 * 1024 * 1024
"""The largest payload a store accepts (the contrib drivers' default)."""
_SCHEMES = ("file", "s3", "gs")
_FILE_KEY = re.compile(r"([0-9a-f]{2})/([0-9a-f]{64})")
"""The only key a `file://` claim may hold: `xx/<sha256>`, as `FileStorageDriver` writes it."""


@dataclass(frozen=True)
class PayloadStore:
    """Where payloads too large for the history go (`TowlinePlugin(payload_store=...)`)."""

    url: str
    """`file://DIR`, `s3://BUCKET/PREFIX` or `gs://BUCKET/PREFIX`."""
    threshold: int = DEFAULT_THRESHOLD
    """Payloads of at least this many bytes are stored; smaller ones stay inline (and
    readable in the UI). 0 stores every payload."""
    max_payload_size: int = DEFAULT_MAX_PAYLOAD
    """The largest payload stored; a larger one still fails its run with `PayloadTooLarge`."""
    missing_after: float = 60.0
    """Seconds a referenced payload may be missing from a reachable store (Temporal retrying
    meanwhile) before it is missing for good: then a run's start input ends the run
    `InvalidRunInput`, and an update or signal carrying it is refused."""
    _storage: list[ExternalStorage] = field(default_factory=list[ExternalStorage], init=False,
                                            repr=False, compare=False)
    _closers: list[Callable[[], Awaitable[None]]] = field(
        default_factory=list[Callable[[], Awaitable[None]]], init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in _SCHEMES:
            raise ConfigurationError(
                f"payload store {self.url!r}: expected file://DIR, s3://BUCKET/PREFIX or "
                "gs://BUCKET/PREFIX")
        if parts.scheme != "file" and not parts.netloc:
            raise ConfigurationError(f"payload store {self.url!r} names no bucket")
        if parts.scheme == "file" and not (parts.netloc or parts.path):
            raise ConfigurationError(f"payload store {self.url!r} names no directory")
        if not self.missing_after >= 0:
            raise ConfigurationError("payload store missing_after must be 0 or more seconds")
        if self.threshold < 0:
            raise ConfigurationError("payload store threshold must be 0 or more bytes")
        if self.max_payload_size <= self.threshold:
            raise ConfigurationError("payload store max_payload_size must exceed the threshold")

    @property
    def scheme(self) -> str:
        """`file`, `s3` or `gs`."""
        return urlsplit(self.url).scheme

    @property
    def bucket(self) -> str:
        """The bucket (s3, gs)."""
        return urlsplit(self.url).netloc

    @property
    def prefix(self) -> str:
        """The key prefix inside the bucket (s3, gs), without slashes at either end."""
        return unquote(urlsplit(self.url).path).strip("/")

    @property
    def directory(self) -> Path:
        """The directory of a `file://` store (relative paths: `file://.towline/payloads`)."""
        parts = urlsplit(self.url)
        return Path(unquote(parts.netloc + parts.path)).expanduser()

    def driver(self) -> StorageDriver:
        """A new driver for this store."""
        if self.scheme == "file":
            return FileStorageDriver(self.directory, max_payload_size=self.max_payload_size)
        from towline.storage.cloud_stores import gcs_driver, s3_driver

        make = s3_driver if self.scheme == "s3" else gcs_driver
        made = make(self.bucket, self.prefix, self.max_payload_size)
        self._closers.append(made.aclose)
        return made.driver

    def external_storage(self) -> ExternalStorage:
        """The data converter's `ExternalStorage` for this store (one driver, made once).

        A reference that can never be read becomes a placeholder rather than a workflow
        task that fails forever (`towline.runtime.unreadable_payloads`)."""
        if not self._storage:
            driver = TolerantDriver(self.driver(), self.missing_after)
            self._storage.append(TolerantStorage(drivers=[driver],
                                                 payload_size_threshold=self.threshold))
        return self._storage[0]

    async def aclose(self) -> None:
        """Close the connections the store's driver opened in this event loop (s3, gs).

        They are opened on first use and otherwise kept for the process's life.
        """
        for close in self._closers:
            await close()


def payload_store(value: str | PayloadStore | None) -> PayloadStore | None:
    """A `PayloadStore` from a URL (None, "" and "none" mean no store)."""
    if isinstance(value, PayloadStore) or value is None:
        return value
    if not value.strip() or value.strip().lower() == "none":
        return None
    return PayloadStore(value.strip())


class FileStorageDriver(StorageDriver):
    """Payloads as files under a directory, named by the SHA-256 of their bytes.

    A payload is written once (to a temporary name, then renamed: a reader never
    sees half a file) and checked against its hash when read back.
    """

    def __init__(self, directory: Path | str, *, name: str = "towline.file",
                 max_payload_size: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.directory = Path(directory)
        # Made now, so that a directory missing later means the store is away (retried
        # until it is back), while a payload missing from it is missing.
        with contextlib.suppress(OSError):  # away right now (a dangling link, no mount)
            self.directory.mkdir(parents=True, exist_ok=True)
        self._name = name
        self.max_payload_size = max_payload_size

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return "towline.file"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        del context
        return await asyncio.to_thread(lambda: [self._write(p.SerializeToString()) for p in payloads])

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        del context
        return await asyncio.to_thread(lambda: [self._read(c) for c in claims])

    def _write(self, data: bytes) -> StorageDriverClaim:
        if len(data) > self.max_payload_size:
            raise ValueError(f"payload of {len(data)} bytes exceeds the store's "
                             f"max_payload_size of {self.max_payload_size} bytes")
        digest = hashlib.sha256(data).hexdigest()
        key = f"{digest[:2]}/{digest}"
        path = self.directory / key
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{digest}.{os.getpid()}.{id(data)}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return StorageDriverClaim(claim_data={"key": key, "sha256": digest})

    def _path(self, claim: StorageDriverClaim) -> tuple[Path, str]:
        """The file a claim names, and its hash; `InvalidPayloadReference` unless it is
        `xx/<sha256>` under the store's directory (never an absolute path, `..`, a symlink
        out, or any other shape: a reference comes from the history, which anyone who can
        start a run or send an update writes)."""
        key, digest = claim.claim_data.get("key", ""), claim.claim_data.get("sha256", "")
        shape = _FILE_KEY.fullmatch(key)
        if shape is None or shape.group(2) != digest or shape.group(1) != digest[:2]:
            shown = {k: v[:80] for k, v in list(claim.claim_data.items())[:4]}
            raise InvalidPayloadReference(
                f"invalid file store reference {shown}: a key is 'xx/<sha256>' under the store")
        root = self.directory.resolve()
        path = (root / key).resolve()
        if path.parent.parent != root:
            raise InvalidPayloadReference(
                f"file store reference {key} leads out of {root} (a symlink)")
        return path, digest

    def _read(self, claim: StorageDriverClaim) -> Payload:
        path, digest = self._path(claim)
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            if not self.directory.is_dir():  # the store is away (unmounted, moved): retried
                raise RuntimeError(f"payload store directory {self.directory} is not there") from e
            raise MissingPayload(f"stored payload {digest[:2]}/{digest} is not in "
                                 f"{self.directory}") from None
        except OSError as e:
            raise RuntimeError(f"stored payload {digest[:2]}/{digest} could not be read from "
                               f"{self.directory}: {e}") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise MissingPayload(f"stored payload {digest} in {self.directory} does not match "
                                 f"its hash")
        payload = Payload()
        payload.ParseFromString(data)
        return payload
