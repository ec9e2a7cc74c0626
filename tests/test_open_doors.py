"""Doors a hostile client could walk through (issue 20, items 4, 9, 10 and 11).

- The `file://` payload store reads only `xx/<sha256>` under its own directory.
- A worker with the wrong key leaves a task failure anyone can read, naming the key id.
- The codec server answers only requests addressed to it by name, a malformed
  `Content-Length` gets a 400, and `towline dev --encrypt` binds it under a secret path.
- `towline mcp-serve --http --auth` wants a bearer token, and SIGTERM stops it quietly.

Servers are real: the session's Temporal dev server, `towline dev` and `towline mcp-serve`
as subprocesses, HTTP over loopback sockets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import json_of, towline, towline_process, until
from google.protobuf import json_format
from mcp import Client as MCPClient
from mcp_helpers import wait_for
from obs_helpers import traced_agent
from ports import free_port
from readme import cli_env, read_until, readme_process, stop_process
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.worker import Worker

from towline.client import start_run, with_towline
from towline.encryption.codec import EncryptionCodec, StaticKeys
from towline.encryption.codec_server import CodecServer, secret_path
from towline.serve.http_guard import HostCheck, bearer_matches
from towline.storage.payload_store import FileStorageDriver, InvalidPayloadReference

pytestmark = pytest.mark.timeout(120)

SECRET = "QUINCE-5081"


# --- item 9: the file store stays in its directory -----------------------------------------


async def test_the_file_store_reads_only_its_own_keys(tmp_path: Path) -> None:
    store = FileStorageDriver(tmp_path / "store")
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"stored"')
    [claim] = await store.store(StorageDriverStoreContext(), [payload])
    context = StorageDriverRetrieveContext()
    assert await store.retrieve(context, [claim]) == [payload]

    # a file outside the store, named by its own hash as a stored payload would be
    outside = tmp_path / "outside"
    outside.mkdir()
    data = Payload(data=b"private").SerializeToString()
    digest = hashlib.sha256(data).hexdigest()
    (outside / digest).write_bytes(data)
    (outside / digest[:2]).mkdir()
    (outside / digest[:2] / digest).write_bytes(data)
    (tmp_path / "store" / digest[:2]).symlink_to(outside / digest[:2])
    hostile = [
        str(outside / digest),                       # an absolute path
        f"{digest[:2]}/../../outside/{digest}",      # climbing out
        f"../outside/{digest[:2]}/{digest}",
        f"{digest[:2]}/{digest}",                    # the right shape, through a symlink out
        f"{'0' if digest[0] != '0' else '1'}{digest[1]}/{digest}",  # a prefix not its hash's
        f"{digest[:2]}/{digest}/",
        digest,
    ]
    for key in hostile:
        claim = StorageDriverClaim(claim_data={"key": key, "sha256": digest})
        with pytest.raises(InvalidPayloadReference):
            await store.retrieve(context, [claim])
    # and a claim whose hash does not match its key
    with pytest.raises(InvalidPayloadReference):
        await store.retrieve(context, [StorageDriverClaim(
            claim_data={"key": f"{digest[:2]}/{digest}", "sha256": "0" * 64})])


# --- item 4: a wrong key's task failure is readable ----------------------------------------


def _codec(key_id: str, key: bytes) -> EncryptionCodec:
    return EncryptionCodec(StaticKeys({key_id: key}, current=key_id))


async def test_a_wrong_key_leaves_a_readable_failure_naming_the_key_id(
    client: Client, target: str, namespace: str
) -> None:
    right, wrong = os.urandom(32), os.urandom(32)
    agent = traced_agent(f"wrong-key-{uuid.uuid4().hex[:6]}")
    sender = with_towline(client, [agent], encryption=_codec("ops-2025", right))
    worker_client = with_towline(client, [agent], encryption=_codec("ops-2024", wrong))
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    run_id = f"wrong-key-{uuid.uuid4().hex[:8]}"
    env = cli_env(target, extra={"TEMPORAL_NAMESPACE": namespace})
    async with Worker(worker_client, task_queue=queue):
        handle = await start_run(sender, agent, f"Remember {SECRET}.", task_queue=queue, id=run_id)
        try:
            done = await until(
                lambda: towline("runs", "--stuck", "--query", f'WorkflowId = "{run_id}"',
                                "--json", env=env),
                lambda d: d.code == 0 and len(json_of(d)) == 1, "the run listed as stuck")
            (row,) = json_of(done)
            table = await towline("runs", "--stuck", "--query", f'WorkflowId = "{run_id}"', env=env)
            history = await client.get_workflow_handle(run_id).fetch_history()
        finally:
            await handle.terminate("test over")
    failure: str = row["failure"]
    assert failure.startswith("key id 'ops-2025' is not among the keys this process holds"), row
    assert "Encoded failure" not in failure
    assert "key id 'ops-2025'" in table.out and "Encoded failure" not in table.out
    recorded = [e.workflow_task_failed_event_attributes.failure for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert recorded and "key id 'ops-2025'" in recorded[0].message
    assert not recorded[0].HasField("encoded_attributes")
    # never key material, never content
    raw = recorded[0].SerializeToString()
    for key in (right, wrong):
        for form in (key, base64.b64encode(key), key.hex().encode()):
            assert form not in raw and form.decode(errors="replace") not in table.out
    assert SECRET.encode() not in raw


# --- item 10: the codec server -------------------------------------------------------------


def _raw_http(port: int, request: bytes, timeout: float = 5) -> tuple[int, bytes]:
    """Send `request` as written (any Host, any Content-Length); the status and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _post(path: str, port: int, body: bytes, *, host: str | None = None,
          length: str | None = None, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length or len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode() + body


def test_the_host_check_and_bearer_tokens() -> None:
    local = HostCheck.serving("127.0.0.1")
    for host in ("localhost:8234", "127.0.0.1", "[::1]:80", "LOCALHOST.:1"):
        assert local.allows(host), host
    for host in ("evil.example:8234", "127.0.0.1.evil.example", "", None, "[::1", "::1"):
        assert not local.allows(host), host
    assert not local.allows_origin("http://evil.example") and local.allows_origin(None)
    assert local.allows_origin("http://localhost:8233")
    wide = HostCheck.serving("0.0.0.0", ["codec.internal"])
    assert wide.allows("codec.internal:443") and not wide.allows("0.0.0.0:8234")
    assert HostCheck.serving("::", ["*"]).allows("anything.example")
    assert bearer_matches("Bearer s3cret", "s3cret") and bearer_matches("bearer s3cret", "s3cret")
    assert not bearer_matches("Bearer s3cre", "s3cret") and not bearer_matches("s3cret", "s3cret")
    assert not bearer_matches(None, "s3cret") and not bearer_matches("Basic s3cret", "s3cret")


def test_the_codec_server_answers_only_its_names_and_sane_lengths(
    capfd: pytest.CaptureFixture[str],
) -> None:
    codec = _codec("k1", os.urandom(32))
    [sealed] = codec.encrypt([Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')])
    body = json_format.MessageToJson(Payloads(payloads=[sealed])).encode()
    with CodecServer(codec, allowed_hosts=["codec.internal"]) as server:
        port = server.port
        status, answer = _raw_http(port, _post("/decode", port, body))
        assert status == 200 and b"ImhpIg==" in answer  # base64 of '"hi"'
        for host in (f"localhost:{port}", "codec.internal"):
            assert _raw_http(port, _post("/decode", port, body, host=host))[0] == 200
        # a DNS-rebinding page: the browser sends the page's own name
        status, answer = _raw_http(port, _post("/decode", port, body, host=f"rebind.example:{port}"))
        assert status == 421 and b'"hi"' not in answer and b"ImhpIg==" not in answer
        get = b"GET / HTTP/1.1\r\nHost: rebind.example\r\nConnection: close\r\n\r\n"
        assert _raw_http(port, get)[0] == 421
        # a Content-Length that is not a number, or is negative: a 400 at once
        for length in ("abc", "-1", "1e3", "+5", "0x10"):
            status, answer = _raw_http(port, _post("/decode", port, body, length=length))
            assert status == 400 and b"Content-Length" in answer, (length, answer)
        # one promising more bytes than it sends gets its answer once it gives up sending
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(_post("/decode", port, b"{}", length="100"))
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100).startswith(b"HTTP/1.0 400")
        # still serving
        assert _raw_http(port, _post("/decode", port, body))[0] == 200
    assert "Traceback" not in capfd.readouterr().err

    path = secret_path()
    with CodecServer(codec, path=path) as server:
        port = server.port
        assert server.url == f"http://127.0.0.1:{port}/{path}"
        assert _raw_http(port, _post("/decode", port, body))[0] == 404
        assert _raw_http(port, _post(f"/{path[:-1]}/decode", port, body))[0] == 404
        assert _raw_http(port, _post(f"/{path}/decode", port, body))[0] == 200
        assert _raw_http(port, _post(f"/{path}/default/decode", port, body))[0] == 200
    assert secret_path() != path and len(path) >= 20


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


_OTHER_USER = """
import sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1] + "/decode", data=sys.argv[2].encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
try:
    print(urllib.request.urlopen(request, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def _command_lines(parent: int) -> list[list[str]]:
    """The command lines of `parent`'s child processes, as any local user reads them."""
    found: list[list[str]] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append((stat.parent / "cmdline").read_bytes().decode().split("\0"))
    return found


async def test_dev_encrypt_decodes_for_its_own_user_only(tmp_path: Path) -> None:
    plain_python = Path("/usr/bin/python3")  # one another user may run (this venv's is root's)
    if os.geteuid() != 0 or not plain_python.exists():
        pytest.skip("needs root and /usr/bin/python3, to call the codec server as another user")
    key = base64.b64encode(os.urandom(32)).decode()
    ports = {"--port": free_port(), "--ui-port": free_port(), "--codec-port": free_port()}
    args = [str(a) for item in ports.items() for a in item]
    proc = await towline_process("dev", "--encrypt", "--state-dir", str(tmp_path / "state"), *args,
                                 env=cli_env(extra={"TOWLINE_ENCRYPTION_KEY": key}), cwd=tmp_path)
    try:
        said = await read_until(proc.stderr, "Point clients at it")
        found = re.search(r"^Codec server\s+(http://127\.0\.0\.1:(\d+)\S*)\s", said,
                          re.MULTILINE)
        assert found, said
        url, port = found.group(1), int(found.group(2))
        assert port == ports["--codec-port"]
        settings = await asyncio.to_thread(
            _get_json, f"http://localhost:{ports['--ui-port']}/api/v1/settings")
        assert settings["Codec"]["Endpoint"] == url  # the UI calls it
        # what another local user sees: the temporal child's command line (`ps`)
        [endpoint] = [line[line.index("--ui-codec-endpoint") + 1]
                      for line in _command_lines(proc.pid) if "--ui-codec-endpoint" in line]
        empty = json_format.MessageToJson(Payloads())
        stranger = await asyncio.create_subprocess_exec(
            str(plain_python), "-c", _OTHER_USER, endpoint, empty, user=65534,
            stdout=asyncio.subprocess.PIPE, cwd="/")
        out, _ = await asyncio.wait_for(stranger.communicate(), 30)
        assert out.decode().strip() == "403", out  # refused, whatever URL it read
        path = url.split(str(port), 1)[1]
        assert _raw_http(port, _post(f"{path}/decode", port, empty.encode()))[0] == 200
        assert _raw_http(port, _post(f"{path}/decode", port, empty.encode(),
                                     host=f"rebind.example:{port}"))[0] == 421
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # its own pid (it shares our process group)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0


# --- item 11: towline mcp-serve --http --auth ----------------------------------------------

def _mcp_post(url: str, headers: dict[str, str]) -> int:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}}
    request = urllib.request.Request(url, data=json.dumps(initialize).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream",
                                              **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:
        return 0  # not listening (yet)


async def test_mcp_serve_over_http_wants_its_token_and_stops_quietly(
    target: str, namespace: str
) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    token = secret_path()
    process = await readme_process(
        'towline mcp-serve --agent examples.calculator:agent --http --auth "$MCP_TOKEN"',
        env=cli_env(target, namespace, extra={"MCP_TOKEN": token}))
    said = ""
    try:
        said = await read_until(process.stderr, "over http://")
        assert "bearer token required" in said and token not in said
        found = re.search(r"over (http://127\.0\.0\.1:(\d+)/mcp)", said)
        assert found, said
        url, port = found.group(1), found.group(2)

        async def answering() -> bool:
            return await asyncio.to_thread(
                _mcp_post, url, {"Authorization": f"Bearer {token}"}) == 200

        await wait_for(answering, timeout=60, interval=0.3)
        assert await asyncio.to_thread(_mcp_post, url, {}) == 401
        assert await asyncio.to_thread(_mcp_post, url, {"Authorization": f"Bearer {token}x"}) == 401
        assert await asyncio.to_thread(_mcp_post, url, {
            "Authorization": f"Bearer {token}", "Host": f"rebind.example:{port}"}) == 421
        with pytest.raises(Exception):  # noqa: B017 - the SDK's client, refused
            async with MCPClient(url) as refused:
                await refused.list_tools()
        listed: list[str] = []

        async def session() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with MCPClient(streamable_http_client(url, http_client=http)) as mcp:
                listed.extend(t.name for t in (await mcp.list_tools()).tools)
                stop_process(process, signal.SIGTERM)  # while the client's session is open
                await asyncio.wait_for(process.wait(), 30)

        with contextlib.suppress(Exception):  # the session ends with the server
            await session()
        assert listed == ["run_calculator"]
    finally:
        stop_process(process, signal.SIGKILL)
        await process.wait()
    assert process.stderr is not None
    err = said + (await process.stderr.read()).decode(errors="replace")
    assert process.returncode == 0, err
    assert "Traceback" not in err and "ERROR" not in err, err
    assert err.rstrip().endswith("stopped"), err
