"""Local S3- and GCS-compatible servers for the payload-store tests (real HTTP servers).

`moto`'s standalone server speaks S3's wire protocol; `gcp-storage-emulator`
speaks GCS's JSON API. Both run as subprocesses on 127.0.0.1, on free ports,
and are stopped by their process id.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ports import free_port

__all__ = ["LocalServer", "s3_server", "gcs_server", "s3_env", "make_s3_bucket", "s3_keys",
           "make_gcs_bucket", "gcs_names"]


@dataclass
class LocalServer:
    """A server process on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    url: str


@asynccontextmanager
async def _serve(cmd: Sequence[str], url: str, probe: str) -> AsyncIterator[LocalServer]:
    process = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL,  # noqa: ASYNC220 - returns at once
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                await asyncio.to_thread(urllib.request.urlopen, url + probe, timeout=2)
                break
            except urllib.error.HTTPError:
                break  # it answers (an error status is an answer)
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[0]} did not start at {url}") from None
                await asyncio.sleep(0.2)
        yield LocalServer(process, url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def s3_server() -> AbstractAsyncContextManager[LocalServer]:
    """`moto.server` on a free port (its S3 endpoint is the returned URL)."""
    port = free_port()
    return _serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                  f"http://127.0.0.1:{port}", "/")


def gcs_server() -> AbstractAsyncContextManager[LocalServer]:
    """`gcp-storage-emulator` on a free port, in memory."""
    port = free_port()
    binary = Path(sys.executable).parent / "gcp-storage-emulator"
    return _serve([str(binary), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
                  f"http://127.0.0.1:{port}", "/storage/v1/b?project=test")


def s3_env(endpoint: str) -> dict[str, str]:
    """The standard AWS settings that point boto at a local S3 server."""
    return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}


async def make_s3_bucket(bucket: str) -> None:
    """Create `bucket` (with the AWS settings of the environment)."""
    import aioboto3  # pyright: ignore[reportMissingTypeStubs]

    async with aioboto3.Session().client("s3") as s3:  # pyright: ignore[reportUnknownMemberType]
        await s3.create_bucket(Bucket=bucket)


async def s3_keys(bucket: str) -> list[str]:
    """The object keys of `bucket`."""
    import aioboto3  # pyright: ignore[reportMissingTypeStubs]

    async with aioboto3.Session().client("s3") as s3:  # pyright: ignore[reportUnknownMemberType]
        listed = await s3.list_objects_v2(Bucket=bucket)
        return [o.get("Key", "") for o in listed.get("Contents", [])]


def make_gcs_bucket(url: str, bucket: str) -> None:
    """Create `bucket` on the emulator at `url`."""
    request = urllib.request.Request(f"{url}/storage/v1/b?project=test", method="POST",
                                     data=f'{{"name": "{bucket}"}}'.encode(),
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()


def gcs_names(url: str, bucket: str) -> list[str]:
    """The object names of `bucket` on the emulator at `url`."""
    import json

    with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o", timeout=10) as answer:
        return [item["name"] for item in json.loads(answer.read()).get("items", [])]

