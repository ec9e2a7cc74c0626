"""The CLI's payload store: `towline dev` keeps one beside its database, commands find it.

`towline dev` stores payloads of 64 KiB and more in `<state dir>/payloads`; the
other commands, run from the same folder against that local server, use the same
store (or the one `TOWLINE_PAYLOAD_STORE` names), so a long prompt stored by one
command is read by the worker and shown by another. A malformed store URL is a
one-line usage error.
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, cli_env, towline, towline_process
from ports import free_port
from readme import read_until

pytestmark = pytest.mark.timeout(300)


async def test_a_bad_store_url_is_a_usage_error(tmp_path: Path) -> None:
    done = await towline("worker", "--agent", "examples.calculator:agent", "--payload-store",
                         "ftp://host/x", env=cli_env("127.0.0.1:1"), cwd=tmp_path)
    assert_one_line_error(done, 2, "payload store 'ftp://host/x'")
    shown = await towline("show", "some-run", env=cli_env("127.0.0.1:1", extra={
        "TOWLINE_PAYLOAD_STORE": "s3://"}), cwd=tmp_path)
    assert_one_line_error(shown, 2, "names no bucket")


async def test_dev_keeps_large_payloads_beside_its_database(tmp_path: Path) -> None:
    proc = await towline_process("dev", "--agent", "examples.calculator:agents", "--port",
                                 str(free_port()), "--ui-port", str(free_port()),
                                 env=cli_env(), cwd=tmp_path)
    try:
        said = await read_until(proc.stderr, "Ctrl-C stops.")
        store = tmp_path / ".towline" / "payloads"
        assert f"Payload store    file://{store}" in said
        assert store.is_dir()
        match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
        assert match, said
        env = cli_env(match.group(1))
        (tmp_path / "long.txt").write_text("What is 6 times 7? " + "Please be exact. " * 8000)
        done = await towline("run", "examples.calculator:agent", "--prompt-file", "long.txt",
                             "--no-worker", "--id", "long-prompt", env=env, cwd=tmp_path)
        assert done.code == 0, done
        assert done.out == "6 times 7 is 42.\n"
        assert [p for p in store.rglob("*") if p.is_file()]  # the prompt went to the store
        shown = await towline("show", "long-prompt", env=env, cwd=tmp_path)
        assert shown.code == 0, shown
        assert "Please be exact." in shown.out  # read back from the store
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 60)


async def test_dev_without_a_store(tmp_path: Path) -> None:
    proc = await towline_process("dev", "--agent", "examples.calculator:agents", "--port",
                                 str(free_port()), "--ui-port", str(free_port()),
                                 "--payload-store", "none", env=cli_env(), cwd=tmp_path)
    try:
        said = await read_until(proc.stderr, "Ctrl-C stops.")
        assert "Payload store" not in said
        assert not (tmp_path / ".towline" / "payloads").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 60)
