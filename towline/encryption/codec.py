"""Payload encryption: `EncryptionCodec` (AES-256-GCM, key id in the payload metadata).

Temporal stores every payload a run produces — the input, model requests and
responses, tool arguments and results, the `towline.counters` memo, the result,
failure details — on the server. With `TowlinePlugin(encryption=...)` (or
`--encrypt` on the CLI) each of them is encrypted by the client or worker before
it leaves the process, and decrypted after it comes back: the server, its
database and anyone reading the raw history see only ciphertext. Search
attributes are never encoded by Temporal (they must stay queryable) and carry
counters only, never content.

Keys: `TOWLINE_ENCRYPTION_KEY` holds one or more comma-separated keys, each a
base64 (or hex) 256-bit key, optionally preceded by `<key id>:`; the first key
encrypts, every key decrypts, so rotation is "put the new key first, keep the
old ones until no run needs them". A key without an id gets a stable id derived
from the key itself (a SHA-256 fingerprint, which reveals nothing about it).
A user-supplied `KeyProvider` (a KMS, a vault) works the same way.

Who holds the keys reads the runs: the worker, the CLI with `--encrypt`, and
`towline codec-server`, which the Temporal UI and `temporal --codec-endpoint`
call to decode payloads for display.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import PayloadCodec

from towline.errors import ConfigurationError
from towline.runtime.unreadable_payloads import unreadable

__all__ = [
    "ENCODING",
    "KEY_ID_METADATA",
    "KEY_ENV",
    "KeyProvider",
    "StaticKeys",
    "EncryptionCodec",
    "DecryptionError",
    "keys_from_env",
    "parse_keys",
    "generate_key",
    "key_id_of",
    "decode_history",
]

ENCODING = b"binary/encrypted"
"""The `encoding` metadata of an encrypted payload (Temporal's samples use the same)."""
KEY_ID_METADATA = "encryption-key-id"
"""Metadata key naming the key a payload was encrypted with."""
KEY_ENV = "TOWLINE_ENCRYPTION_KEY"
"""The environment variable `keys_from_env` reads."""
_NONCE = 12


class DecryptionError(ValueError):
    """A payload that cannot be decrypted: an unknown key id, or a wrong or corrupted key."""


@runtime_checkable
class KeyProvider(Protocol):
    """Where `EncryptionCodec` gets keys: one to encrypt with, any known one to decrypt."""

    def encryption_key(self) -> tuple[str, bytes]:
        """The key id and 32-byte key new payloads are encrypted with."""
        ...

    def decryption_key(self, key_id: str) -> bytes | None:
        """The key with this id, or None if this provider does not know it."""
        ...


def key_id_of(key: bytes) -> str:
    """The id a key without an explicit one gets: a fingerprint (SHA-256 prefix) of the key."""
    return "k-" + hashlib.sha256(b"towline-key-id:" + key).hexdigest()[:12]


@dataclass(frozen=True)
class StaticKeys:
    """Keys held in memory: `current` encrypts, every key in `keys` decrypts."""

    keys: Mapping[str, bytes]
    """Key id -> 32-byte AES-256 key."""
    current: str
    """The id of the key new payloads are encrypted with."""

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigurationError("StaticKeys needs at least one key")
        for key_id, key in self.keys.items():
            if not key_id or any(c in key_id for c in ",: \n"):
                raise ConfigurationError(f"invalid key id {key_id!r} (no commas, colons or spaces)")
            if len(key) != 32:
                raise ConfigurationError(
                    f"key {key_id!r} has {len(key)} bytes; AES-256 needs exactly 32"
                )
        if self.current not in self.keys:
            raise ConfigurationError(f"the current key id {self.current!r} is not among the keys")

    def encryption_key(self) -> tuple[str, bytes]:
        """The current key."""
        return self.current, self.keys[self.current]

    def decryption_key(self, key_id: str) -> bytes | None:
        """Any known key."""
        return self.keys.get(key_id)


def _decode_key(text: str) -> bytes:
    """A key written as 64 hex digits, base64 or URL-safe base64."""
    text = text.strip()
    if len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text):
        return bytes.fromhex(text)
    padded = text + "=" * (-len(text) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise ConfigurationError("an encryption key is neither base64 nor 64 hex digits")


def parse_keys(spec: str) -> StaticKeys:
    """Keys from `[id:]key[,[id:]key...]` (the first encrypts); errors never quote a key."""
    keys: dict[str, bytes] = {}
    order: list[str] = []
    for n, item in enumerate(s for s in spec.split(",") if s.strip()):
        key_id, sep, text = item.strip().rpartition(":")
        key = _decode_key(text if sep else item)
        key_id = key_id.strip() if sep else key_id_of(key)
        if len(key) != 32:
            raise ConfigurationError(
                f"encryption key #{n + 1} has {len(key)} bytes; AES-256 needs exactly 32 "
                "(make one with `towline codec-server --generate-key`)"
            )
        if key_id in keys and keys[key_id] != key:
            raise ConfigurationError(f"two different keys have the id {key_id!r}")
        keys[key_id] = key
        order.append(key_id)
    if not keys:
        raise ConfigurationError("no encryption key given")
    return StaticKeys(keys=keys, current=order[0])


def keys_from_env(variable: str = KEY_ENV) -> StaticKeys:
    """The keys in `$TOWLINE_ENCRYPTION_KEY` (read where the codec is built: worker or client)."""
    spec = os.environ.get(variable, "")
    if not spec.strip():
        raise ConfigurationError(
            f"encryption is on but {variable} is not set; set it to a 256-bit key "
            "(make one with `towline codec-server --generate-key`)"
        )
    return parse_keys(spec)


def generate_key() -> str:
    """A fresh random 256-bit key, base64-encoded (the form `TOWLINE_ENCRYPTION_KEY` takes)."""
    return base64.b64encode(os.urandom(32)).decode()


@dataclass(frozen=True)
class EncryptionCodec(PayloadCodec):
    """AES-256-GCM payload codec; `TowlinePlugin(encryption=EncryptionCodec())` turns it on.

    Each payload is serialised whole (metadata and data), encrypted with a fresh
    96-bit nonce, and replaced by a `binary/encrypted` payload whose
    `encryption-key-id` metadata names the key; the key id is also bound to the
    ciphertext as associated data, so a payload cannot be relabelled. Payloads that
    are not encrypted (runs from before encryption was turned on) decode as they are.
    """

    keys: KeyProvider = field(default_factory=keys_from_env)
    """Where keys come from (default: `TOWLINE_ENCRYPTION_KEY`, read when the codec is built)."""

    def __post_init__(self) -> None:
        if not isinstance(self.keys, KeyProvider):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("EncryptionCodec.keys must be a KeyProvider")

    @property
    def key_id(self) -> str:
        """The id of the key new payloads are encrypted with."""
        return self.keys.encryption_key()[0]

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt every payload."""
        return self.encrypt(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt encrypted payloads; pass the others through."""
        return self.decrypt(payloads)

    def encrypt(self, payloads: Iterable[Payload]) -> list[Payload]:
        """`encode`, synchronously."""
        key_id, key = self.keys.encryption_key()
        aes = AESGCM(key)
        out: list[Payload] = []
        for p in payloads:
            nonce = os.urandom(_NONCE)
            sealed = aes.encrypt(nonce, p.SerializeToString(), key_id.encode())
            out.append(Payload(
                metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()},
                data=nonce + sealed,
            ))
        return out

    def decrypt(self, payloads: Iterable[Payload]) -> list[Payload]:
        """`decode`, synchronously; `DecryptionError` for a payload no known key opens."""
        out: list[Payload] = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                out.append(p)
                continue
            key_id = p.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
            key = self.keys.decryption_key(key_id)
            # The key id first: a stuck run's one-line listing cuts what follows.
            if key is None:
                raise DecryptionError(
                    f"key id {key_id[:80]!r} is not among the keys this process holds ({KEY_ENV} "
                    "or the key provider): a payload encrypted with it cannot be decrypted"
                )
            try:
                plain = AESGCM(key).decrypt(p.data[:_NONCE], p.data[_NONCE:], key_id.encode())
                decoded = Payload()
                decoded.ParseFromString(plain)
            except (InvalidTag, ValueError, DecodeError):
                # The key is known, so no key can come to open this: forged or corrupted.
                # A placeholder, not an error: an update carrying it is refused and a signal
                # dropped, where an error would fail the workflow task for good
                # (`towline.runtime.unreadable_payloads`); an unknown key id above waits for its key.
                out.append(unreadable(
                    f"key id {key_id[:80]!r}: a payload does not decrypt with the key this "
                    "process holds under that id (forged or corrupted)"))
                continue
            out.append(decoded)
        return out


def _payload_slots(message: ProtoMessage) -> list[tuple[ProtoMessage, str, object]]:
    """Every place a `Payload` sits in `message`: (container message, field name, key or index)."""
    found: list[tuple[ProtoMessage, str, object]] = []
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.message_type is None:
                continue
            for key, item in value.items():  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                if value_fd.message_type.full_name == Payload.DESCRIPTOR.full_name:
                    found.append((message, fd.name, key))
                else:
                    found.extend(_payload_slots(item))  # pyright: ignore[reportUnknownArgumentType]
        elif fd.is_repeated:
            for i, item in enumerate(value):  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
                if fd.message_type.full_name == Payload.DESCRIPTOR.full_name:
                    found.append((message, fd.name, i))
                else:
                    found.extend(_payload_slots(item))  # pyright: ignore[reportUnknownArgumentType]
        elif fd.message_type.full_name == Payload.DESCRIPTOR.full_name:
            found.append((message, fd.name, None))
        else:
            found.extend(_payload_slots(value))
    return found


async def decode_history(events: Iterable[HistoryEvent], codec: PayloadCodec) -> list[HistoryEvent]:
    """Copies of `events` with every payload decoded by `codec` (inputs, results, memos, ...).

    For reading a history the way a key holder sees it (e.g. the ledger of an
    encrypted run with `towline.runtime.ledger.counters_from_history`).
    """
    decoded: list[HistoryEvent] = []
    for event in events:
        copy = HistoryEvent()
        copy.CopyFrom(event)
        slots = _payload_slots(copy)
        if slots:
            originals: list[Payload] = []
            for container, name, key in slots:
                holder = getattr(container, name)
                originals.append(holder if key is None else holder[key])
            plain = await codec.decode(originals)
            for (container, name, key), payload in zip(slots, plain, strict=True):
                holder = getattr(container, name)
                (holder if key is None else holder[key]).CopyFrom(payload)
        decoded.append(copy)
    return decoded
