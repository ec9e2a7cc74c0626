"""Fixtures of the provider tests: a fake provider server per test, and quick retries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_server import FakeProvider


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """A fake provider on 127.0.0.1 (a free port), stopped after the test."""
    server = FakeProvider().start()
    try:
        yield server
    finally:
        server.stop()
