"""The ledger protobuf: committed generated code is current, and the message round-trips.

The ledger (``towline.v1.RunCounters``) is persisted in workflow memos as ``json/protobuf``,
so its field numbers, JSON names and the committed generated code are part of the
persisted format. These tests fail if someone edits ``ledger.proto`` without regenerating,
edits generated code by hand, or renumbers/retypes a field.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from temporalio.converter import DataConverter

from towline.proto.towline.v1 import ledger_pb2
from towline.proto.towline.v1.ledger_pb2 import RunCounters

REPO_ROOT = Path(__file__).resolve().parent.parent
COMMITTED = REPO_ROOT / "towline" / "proto" / "towline" / "v1"
GENERATED_NAMES = ("ledger_pb2.py", "ledger_pb2.pyi")


def _sample() -> RunCounters:
    """A ledger with every field set to a distinct non-default value."""
    return RunCounters(
        tool_retries={"search": 2, "calculator": 0, "fetch": 1},
        output_retries_used=1,
        run_step=7,
        tool_calls=12,
        max_steps=50,
        output_retries=3,
        requests=9,
        input_tokens=3_000_000_000,  # beyond int32: must survive as int64
        output_tokens=4567,
        schema_version=3,
        cost_micros=1234,
        unpriced_requests=2,
        agent_version="0123456789ab",
    )


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    """``scripts/gen_proto.py`` reproduces the committed ``ledger_pb2.py``/``.pyi`` exactly."""
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gen_proto.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in GENERATED_NAMES:
        fresh = (tmp_path / "towline" / "v1" / name).read_bytes()
        committed = (COMMITTED / name).read_bytes()
        assert fresh == committed, f"{name} is stale: run `python scripts/gen_proto.py`"


def test_schema_matches_contract() -> None:
    """Field names, numbers and types are the persisted format and must never change."""
    int32, int64 = FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64
    expected = {
        "output_retries_used": (2, int32),
        "run_step": (3, int32),
        "tool_calls": (4, int32),
        "max_steps": (5, int32),
        "output_retries": (6, int32),
        "requests": (7, int64),
        "input_tokens": (8, int64),
        "output_tokens": (9, int64),
        "schema_version": (10, int32),
        "cost_micros": (11, int64),
        "agent_version": (12, FieldDescriptor.TYPE_STRING),
        "unpriced_requests": (13, int64),
    }
    descriptor = RunCounters.DESCRIPTOR
    assert descriptor.full_name == "towline.v1.RunCounters"
    assert ledger_pb2.DESCRIPTOR.package == "towline.v1"
    actual = {f.name: (f.number, f.type) for f in descriptor.fields if f.name != "tool_retries"}
    assert actual == expected
    retries = descriptor.fields_by_name["tool_retries"]
    assert retries.number == 1
    entry = retries.message_type
    assert entry is not None and entry.GetOptions().map_entry
    key_type = entry.fields_by_name["key"].type
    value_type = entry.fields_by_name["value"].type
    assert (key_type, value_type) == (FieldDescriptor.TYPE_STRING, int32)


def test_json_round_trip() -> None:
    """``json_format`` round-trips every field; int64 values are JSON strings per proto3."""
    original = _sample()
    text = json_format.MessageToJson(original)
    decoded = json.loads(text)
    assert decoded["inputTokens"] == "3000000000"
    assert decoded["runStep"] == 7
    assert decoded["toolRetries"] == {"search": 2, "calculator": 0, "fetch": 1}
    restored = json_format.Parse(text, RunCounters())
    assert restored == original
    assert dict(restored.tool_retries) == {"search": 2, "calculator": 0, "fetch": 1}
    # The binary encoding round-trips as well.
    assert RunCounters.FromString(original.SerializeToString()) == original


def test_temporal_payload_is_json_protobuf() -> None:
    """The Temporal converter stores the ledger as readable ``json/protobuf`` (memo format)."""
    converter = DataConverter.default.payload_converter
    [payload] = converter.to_payloads([_sample()])
    assert payload.metadata["encoding"] == b"json/protobuf"
    assert payload.metadata["messageType"] == b"towline.v1.RunCounters"
    assert json.loads(payload.data)["toolCalls"] == 12
    [restored] = converter.from_payloads([payload], [RunCounters])
    assert restored == _sample()
