"""What the CLI prints and reads holds no surprise from a model, a tool or a folder.

Model and tool text reached the terminal raw, ANSI and OSC 52 (a clipboard write) included:
`towline run` and `towline watch` now show control characters escaped. `towline rerun FILE.json`
parsed every `*.json` beside the file (a pipe there hung it); it reads only the file, unless
the run continued as new. Real commands as subprocesses, against the dev server.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
from pathlib import Path

from audit_agents import hostile
from cli_helpers import TESTS_ON_PATH, towline
from readme import REPO, cli_env
from temporalio.client import Client

from towline.testing import towline_worker
from towline.testing.rerun_sources import load_histories

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def _raw_controls(text: str) -> list[str]:
    """Control characters in `text`, but the dimming `dim` writes."""
    return RAW.findall(text.replace("\x1b[2m", "").replace("\x1b[22m", ""))


async def test_run_and_watch_escape_terminal_control_in_model_and_tool_text(
    client: Client, target: str, namespace: str,
) -> None:
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH})
    workflow_id = f"hostile-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [hostile]) as (_, queue):
        done = await towline("run", "audit_agents:hostile", "hi", "--no-worker", "--task-queue",
                             queue, "--id", workflow_id, env=env)
        assert done.code == 0, done
        watched = await towline("watch", workflow_id, env=env)
        assert watched.code == 0, watched
        as_json = await towline("show", workflow_id, "--json", env=env)
    assert as_json.code == 0, as_json
    json.loads(as_json.out)  # JSON output is escaped as JSON: it still parses
    for said in (done.out, done.err, watched.out, as_json.out):
        assert _raw_controls(said) == [], repr(said)
    assert "model says \\x1b]52;c;ZXZpbA==\\x07" in done.out, done.out
    assert "second line" in done.out  # newlines stay
    assert "tool says \\x1b]52" in done.err, done.err
    assert "model says \\x1b]52" in watched.out and "\\u202eevil\\x9b" in watched.out, watched.out


async def test_rerun_reads_only_the_file_it_is_given(tmp_path: Path) -> None:
    history = tmp_path / "history-tools.json"
    shutil.copy(REPO / "tests" / "histories" / "history-tools.json", history)
    os.mkfifo(tmp_path / "trap.json")  # reading it blocks until someone writes
    reading = asyncio.ensure_future(asyncio.to_thread(load_histories, history))
    try:
        [only] = await asyncio.wait_for(asyncio.shield(reading), 10)
    finally:
        if not reading.done():  # it opened the pipe: let it go
            fd = os.open(tmp_path / "trap.json", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
    assert only.workflow_id
