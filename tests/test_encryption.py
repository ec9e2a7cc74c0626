"""Payload encryption: nothing readable at rest on the server; key holders read everything.

Runs go through a real dev server with `TowlinePlugin(encryption=...)`; the raw history is
fetched with a plain client (no codec), as the server stores it, and searched byte by byte.
"""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from collections.abc import Sequence

import pytest
from obs_helpers import traced_agent
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Worker

from scripts import Script, call, calls
from towline import Agent, Limits, TowlinePlugin, tool
from towline.capabilities import RedactPII
from towline.client import run
from towline.encryption.codec import (
    ENCODING,
    KEY_ID_METADATA,
    DecryptionError,
    EncryptionCodec,
    StaticKeys,
    decode_history,
    key_id_of,
    keys_from_env,
    parse_keys,
)
from towline.errors import ConfigurationError, RunError
from towline.runtime.ledger import MEMO_KEY, counters_from_history
from towline.runtime.unreadable_payloads import unreadable_reason

SECRET = "PAPAYA-7731"
PROMPT = f"The secret word is {SECRET}. What are 2+3 and 6*7?"


def new_key() -> bytes:
    return os.urandom(32)


def codec_for(*keys: tuple[str, bytes]) -> EncryptionCodec:
    return EncryptionCodec(StaticKeys(dict(keys), current=keys[0][0]))


# --- the codec on its own --------------------------------------------------------------------


async def test_round_trip_and_metadata() -> None:
    codec = codec_for(("k1", new_key()))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=f'"{SECRET}"'.encode())
    [sealed] = await codec.encode([plain])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == b"k1"
    assert SECRET.encode() not in sealed.SerializeToString()
    [opened] = await codec.decode([sealed])
    assert opened == plain
    # the same plaintext never gives the same ciphertext (a fresh nonce each time)
    [again] = await codec.encode([plain])
    assert again.data != sealed.data
    # unencrypted payloads (runs from before encryption) pass through decode
    assert await codec.decode([plain]) == [plain]


async def test_rotation_by_key_id() -> None:
    old, new = ("2024", new_key()), ("2025", new_key())
    [sealed_old] = await codec_for(old).encode([Payload(data=b"x")])
    rotated = codec_for(new, old)  # new key first: encrypts; the old one still decrypts
    [sealed_new] = await rotated.encode([Payload(data=b"y")])
    assert sealed_new.metadata[KEY_ID_METADATA] == b"2025"
    assert [p.data for p in await rotated.decode([sealed_old, sealed_new])] == [b"x", b"y"]
    with pytest.raises(DecryptionError, match="key id '2025'"):
        await codec_for(old).decode([sealed_new])


async def test_tampering_and_relabelling_are_refused() -> None:
    """Under a key this process holds, nothing can open a forged payload: it decodes to an
    unreadable placeholder (which no converter reads: an update carrying it is refused, a
    signal dropped, a start input ends the run), never to content, never a stuck task."""
    key = new_key()
    codec = codec_for(("a", key), ("b", key))
    [sealed] = await codec.encode([Payload(data=b"data")])
    flipped = Payload()
    flipped.CopyFrom(sealed)
    flipped.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    relabelled = Payload()
    relabelled.CopyFrom(sealed)
    relabelled.metadata[KEY_ID_METADATA] = b"b"  # same key, other id: bound as associated data
    truncated = Payload()
    truncated.CopyFrom(sealed)
    truncated.data = sealed.data[:5]
    for forged in (flipped, relabelled, truncated):
        [decoded] = await codec.decode([forged])
        assert decoded.data != b"data"
        reason = unreadable_reason(decoded)
        assert reason is not None and "does not decrypt with the key" in reason


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    k1, k2 = new_key(), new_key()
    monkeypatch.setenv("TOWLINE_ENCRYPTION_KEY",
                       f"new:{base64.b64encode(k2).decode()}, {k1.hex()}")
    keys = keys_from_env()
    assert keys.current == "new"
    assert keys.decryption_key(key_id_of(k1)) == k1  # a key without an id: its fingerprint
    assert EncryptionCodec().key_id == "new"
    monkeypatch.setenv("TOWLINE_ENCRYPTION_KEY", base64.urlsafe_b64encode(k1).decode().rstrip("="))
    assert keys_from_env().encryption_key() == (key_id_of(k1), k1)
    monkeypatch.delenv("TOWLINE_ENCRYPTION_KEY")
    with pytest.raises(ConfigurationError, match="TOWLINE_ENCRYPTION_KEY is not set"):
        EncryptionCodec()
    short = base64.b64encode(b"x" * 16).decode()
    with pytest.raises(ConfigurationError, match="16 bytes") as e:
        parse_keys(short)
    assert short not in str(e.value)  # an error never quotes a key
    with pytest.raises(ConfigurationError, match="neither base64"):
        parse_keys("not a key!")


# --- real runs ---------------------------------------------------------------------------------


def raw_bytes(events: Sequence[HistoryEvent]) -> bytes:
    """A history as the server stores it (protobuf bytes)."""
    return b"".join(e.SerializeToString() for e in events)


async def test_history_at_rest_holds_no_content(target: str, namespace: str, client: Client) -> None:
    codec = codec_for(("k1", new_key()))
    agent = traced_agent(f"enc-{uuid.uuid4().hex[:6]}")
    secure = await Client.connect(target, namespace=namespace,
                                  plugins=[TowlinePlugin([agent], encryption=codec)])
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with Worker(secure, task_queue=queue):
        result = await run(secure, agent.name, PROMPT, task_queue=queue)
    assert result.output == "The results are [5, 42]."  # the key holder reads the result

    raw = await client.get_workflow_handle(result.run_id).fetch_history()  # no codec
    events = list(raw.events)
    blob = raw_bytes(events)
    for plaintext in (SECRET, "The results are", '"multiply"', "towline.v1.RunCounters"):
        assert plaintext.encode() not in blob, plaintext
    # search attributes stay plain and queryable, and hold counters only
    desc = await client.get_workflow_handle(result.run_id).describe()
    attributes = desc.raw_description.workflow_execution_info.search_attributes.indexed_fields
    assert attributes["TowlineAgent"].data == f'"{agent.name}"'.encode()
    assert attributes["TowlineStatus"].data == b'"succeeded"'
    query = f'TowlineAgent = "{agent.name}" AND TowlineStatus = "succeeded"'
    found: list[str] = []
    for _ in range(100):  # the visibility store lags the run's last upsert
        found = [w.id async for w in client.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.1)
    assert found == [result.run_id]
    # the ledger memo is encrypted too: readable only with the key
    memo = desc.raw_description.workflow_execution_info.memo.fields[MEMO_KEY]
    assert memo.metadata["encoding"] == ENCODING

    decoded = await decode_history(events, codec)
    assert SECRET.encode() in raw_bytes(decoded)
    snapshots = counters_from_history(decoded)
    assert snapshots[-1] == result.counters
    assert snapshots[-1].tool_calls == 2


@tool
def lookup(name: str) -> str:
    """Find a contact's email address."""
    return f"{name} <{name.lower()}@example.com>"


async def test_redact_pii_under_encryption(target: str, namespace: str, client: Client) -> None:
    """RedactPII still keeps PII from the model; encryption keeps it from the server."""
    codec = codec_for(("k1", new_key()))
    script = Script([calls(call("lookup", {"name": "Ada"}, "c1")), "Done: [REDACTED_EMAIL]"])
    agent = Agent(name=f"pii-{uuid.uuid4().hex[:6]}", model=script.model, tools=[lookup],
                  capabilities=[RedactPII(kinds=["email"])])
    secure = await Client.connect(target, namespace=namespace,
                                  plugins=[TowlinePlugin([agent], encryption=codec)])
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with Worker(secure, task_queue=queue):
        result = await run(secure, agent.name, "Write to bob@example.org about Ada.",
                           task_queue=queue)
    seen = "".join(m.model_dump_json() for m in script.seen[-1].messages)
    assert "@example" not in seen and "[REDACTED_EMAIL]" in seen  # the model never saw it
    raw = raw_bytes(list((await client.get_workflow_handle(result.run_id).fetch_history()).events))
    assert b"@example" not in raw and b"REDACTED" not in raw  # the server sees neither
    canonical = "".join(m.model_dump_json() for m in result.messages)
    assert "bob@example.org" in canonical and "ada@example.com" in canonical  # key holder: all


async def test_failures_are_encrypted_and_readable_with_the_key(
    target: str, namespace: str, client: Client
) -> None:
    codec = codec_for(("k1", new_key()))
    agent = traced_agent(f"encfail-{uuid.uuid4().hex[:6]}")
    secure = await Client.connect(target, namespace=namespace,
                                  plugins=[TowlinePlugin([agent], encryption=codec)])
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    async with Worker(secure, task_queue=queue):
        with pytest.raises(RunError) as failed:
            await run(secure, agent.name, PROMPT, task_queue=queue, limits=Limits(max_steps=1),
                      id=f"encfail-{uuid.uuid4().hex[:6]}")
    err = failed.value
    assert err.reason == "MaxStepsExceeded" and "max_steps 1" in err.message
    assert err.partial is not None and SECRET in err.partial.messages[0].model_dump_json()
    handle = client.get_workflow_handle(err.partial.run_id)
    blob = raw_bytes(list((await handle.fetch_history()).events))
    assert SECRET.encode() not in blob
    assert b"max_steps 1" not in blob  # the failure message travels encoded too
    assert b"MaxStepsExceeded" in blob  # the reason (failure type) stays visible
