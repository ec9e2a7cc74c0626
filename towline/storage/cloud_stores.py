"""`s3://` and `gs://` payload stores: Temporal's contrib drivers, with a key prefix.

The drivers (`temporalio.contrib.aws.s3driver`, `temporalio.contrib.gcp.gcsdriver`)
take a client object that must be created inside a running event loop and kept
open; a `PayloadStore` is configured before any loop runs. So the clients here
open the SDK's client lazily, once per event loop, on first use (closed by
`PayloadStore.aclose`), and put the URL's prefix in front of every object key (the drivers' own keys start with
`v0/`). The SDKs are imported only then: towline without the extras works, and a
store that needs one fails with a message naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from temporalio.converter import StorageDriver

from towline.errors import ConfigurationError

__all__ = ["s3_driver", "gcs_driver", "Closable"]


def _missing(extra: str, error: ImportError) -> ConfigurationError:
    return ConfigurationError(f"this payload store needs towline[{extra}] "
                              f"(pip install 'towline[{extra}]'): {error}")


Opened = tuple[Any, Callable[[], Awaitable[None]]]
"""A driver client and what closes the SDK client under it."""


class _PerLoop:
    """One client per event loop, opened on first use and kept until `aclose`."""

    def __init__(self, open_client: Callable[[], Awaitable[Opened]]) -> None:
        self._open = open_client
        self._clients: dict[int, Opened] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def get(self) -> Any:
        loop = id(asyncio.get_running_loop())
        opened = self._clients.get(loop)
        if opened is not None:
            return opened[0]
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            if loop not in self._clients:
                self._clients[loop] = await self._open()
            return self._clients[loop][0]

    async def aclose(self) -> None:
        """Close the client of the running event loop, if one was opened."""
        opened = self._clients.pop(id(asyncio.get_running_loop()), None)
        if opened is not None:
            await opened[1]()


def _prefixed(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key


@dataclass(frozen=True)
class Closable:
    """A driver, and what closes the connections it opened (`PayloadStore.aclose`)."""

    driver: StorageDriver
    aclose: Callable[[], Awaitable[None]]


def s3_driver(bucket: str, prefix: str, max_payload_size: int) -> Closable:
    """`S3StorageDriver` for `bucket`, keys under `prefix` (extra `towline[s3]`)."""
    try:
        import aioboto3  # pyright: ignore[reportMissingTypeStubs]
        from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
    except ImportError as e:
        raise _missing("s3", e) from None

    async def open_client() -> Opened:
        context: Any = aioboto3.Session().client("s3")  # pyright: ignore[reportUnknownMemberType]
        client = new_aioboto3_client(await context.__aenter__())

        async def close() -> None:
            await context.__aexit__(None, None, None)

        return client, close

    class PrefixedS3(S3StorageDriverClient):
        def __init__(self) -> None:
            self.clients = _PerLoop(open_client)

        async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
            client = await self.clients.get()
            await client.put_object(bucket=bucket, key=_prefixed(prefix, key), data=data)

        async def object_exists(self, *, bucket: str, key: str) -> bool:
            client = await self.clients.get()
            return bool(await client.object_exists(bucket=bucket, key=_prefixed(prefix, key)))

        async def get_object(self, *, bucket: str, key: str) -> bytes:
            client = await self.clients.get()
            return bytes(await client.get_object(bucket=bucket, key=_prefixed(prefix, key)))

    client = PrefixedS3()
    return Closable(S3StorageDriver(client=client, bucket=bucket, max_payload_size=max_payload_size),
                    client.clients.aclose)


def gcs_driver(bucket: str, prefix: str, max_payload_size: int) -> Closable:
    """`GCSStorageDriver` for `bucket`, objects under `prefix` (extra `towline[gcs]`)."""
    try:
        from gcloud.aio.storage import Storage  # pyright: ignore[reportMissingTypeStubs]
        from temporalio.contrib.gcp.gcsdriver import GCSStorageDriver, GCSStorageDriverClient
        from temporalio.contrib.gcp.gcsdriver.gcloud_aio import new_gcloud_aio_client
    except ImportError as e:
        raise _missing("gcs", e) from None

    async def open_client() -> Opened:
        storage = Storage()
        return new_gcloud_aio_client(storage), storage.close

    class PrefixedGCS(GCSStorageDriverClient):
        def __init__(self) -> None:
            self.clients = _PerLoop(open_client)

        async def put_object(self, *, bucket: str, object_name: str, data: bytes) -> None:
            client = await self.clients.get()
            await client.put_object(bucket=bucket, object_name=_prefixed(prefix, object_name),
                                    data=data)

        async def object_exists(self, *, bucket: str, object_name: str) -> bool:
            client = await self.clients.get()
            return bool(await client.object_exists(bucket=bucket,
                                                   object_name=_prefixed(prefix, object_name)))

        async def get_object(self, *, bucket: str, object_name: str) -> bytes:
            client = await self.clients.get()
            return bytes(await client.get_object(bucket=bucket,
                                                 object_name=_prefixed(prefix, object_name)))

    client = PrefixedGCS()
    return Closable(GCSStorageDriver(client=client, bucket=bucket, max_payload_size=max_payload_size),
                    client.clients.aclose)
