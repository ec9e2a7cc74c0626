"""Protobuf package ``towline`` (import path mirrors the proto package)."""
