"""External payload storage: large payloads in a blob store, a reference in the history.

Temporal refuses a payload over 2 MiB, and every payload a run writes stays in its
history. With a payload store, Temporal's external storage (`ExternalStorage` in
the data converter) puts every payload of at least `threshold` bytes into the
store and writes a small reference into the history instead; workers and clients
configured with the same store read it back transparently. Smaller payloads stay
inline, readable in the Temporal UI. The payload codec (encryption,
`towline.codec`) applies first, so the store only ever holds encrypted bytes.

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
import hashlib
import os
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

__all__ = [
    "PayloadStore",
    "FileStorageDriver",
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
        from towline.cloud_stores import gcs_driver, s3_driver

        make = s3_driver if self.scheme == "s3" else gcs_driver
        made = make(self.bucket, self.prefix, self.max_payload_size)
        self._closers.append(made.aclose)
        return made.driver

    def external_storage(self) -> ExternalStorage:
        """The data converter's `ExternalStorage` for this store (one driver, made once)."""
        if not self._storage:
            self._storage.append(ExternalStorage(drivers=[self.driver()],
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

    def _read(self, claim: StorageDriverClaim) -> Payload:
        key, digest = claim.claim_data.get("key", ""), claim.claim_data.get("sha256", "")
        path = self.directory / key
        if not digest or Path(key).name != digest or ".." in Path(key).parts:
            raise ValueError(f"invalid file store claim {dict(claim.claim_data)}")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise RuntimeError(f"stored payload {key} not found in {self.directory}: {e}") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"stored payload {key} in {self.directory} does not match its hash")
        payload = Payload()
        payload.ParseFromString(data)
        return payload
