"""What a user sees of the frontier features on the command line: the model's thinking in
`towline run`, `watch` and `show` (apart from the answer, dimmed on a terminal, hidden with
`--hide-thinking`), and files attached to a prompt with `--attach`, their bytes riding the
payload store past Temporal's 2 MiB limit."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TESTS_ON_PATH, assert_one_line_error, cli_env, towline
from frontier_agents import (
    FIRST_THOUGHT,
    SIGNATURE,
    SNAPSHOT,
    attachment_line,
    snapper,
    stream_thinker,
    thinker,
)
from readme import REPO, Terminal
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from towline.cli.render import content, conversation_lines
from towline.client import start_run
from towline.events import preview
from towline.media import media_type_of
from towline.messages import BinaryContent, ModelRequest, ToolReturnPart, UserPart
from towline.testing import history_events, towline_worker

pytestmark = pytest.mark.timeout(240)

DIM = "\x1b[2m"
REFERENCE = b"temporal.api.sdk.v1.ExternalStorageReference"


def _env(target: str, namespace: str) -> dict[str, str]:
    """The CLI's environment, with `tests/` importable (the agents of `frontier_agents`)."""
    return cli_env(target, namespace, {"PYTHONPATH": TESTS_ON_PATH})


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# --- media types from content ------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image/png"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", "image/jpeg"),
    (b"GIF89a\x01\x00", "image/gif"),
    (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
    (b"%PDF-1.7\n%\xe2\xe3", "application/pdf"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "audio/wav"),
    (b"ID3\x04\x00\x00\x00", "audio/mpeg"),
    (b"\xff\xfb\x90\x64\x00", "audio/mpeg"),
    (b"OggS\x00\x02", "audio/ogg"),
    ("Grüße,\tworld\r\n".encode(), "text/plain"),
    (b"\x00\x01\x02binary", None),
    (b"\xc3\x28 not utf-8", None),
    (b"RIFF\x24\x00\x00\x00AVI LIST", None),
    (b"", None),
])
def test_media_type_is_read_from_content(data: bytes, expected: str | None) -> None:
    assert media_type_of(data) == expected


def test_media_is_named_never_printed() -> None:
    image = BinaryContent(data=b"\x89PNG\r\n\x1a\n" + b"\x00" * 5000, media_type="image/png")
    as_json = image.model_dump(mode="json")  # how a tool's return reads back from history
    assert preview(["Look:", image]) == "Look:\n[image/png, 5008 bytes]"
    assert preview([{"rows": 3}, as_json]) == [{"rows": 3}, "[image/png, 5008 bytes]"]
    assert content(["chart", as_json]) == "chart [image/png, 5008 bytes]"
    assert content(["a", "b"]) == '["a", "b"]'  # no media: JSON as before
    lines = conversation_lines([
        ModelRequest(parts=[UserPart(content=["What is this?", image])]),
        ModelRequest(parts=[ToolReturnPart(tool_name="plot", tool_call_id="p", content=[as_json])]),
    ])
    assert lines == ["  user       What is this? [image/png, 5008 bytes]",
                     "  tool       plot [p] succeeded: [image/png, 5008 bytes]"]


# --- thinking -----------------------------------------------------------------------------------


async def test_run_and_show_print_the_thinking_apart(target: str, namespace: str) -> None:
    env = _env(target, namespace)
    wid = f"thinker-{uuid.uuid4().hex[:8]}"
    done = await towline("run", "frontier_agents:thinker", "What is 6 times 7?", "--id", wid,
                         "--task-queue", f"tq-{wid}", env=env)
    assert done.code == 0, done
    assert done.out == "6 times 7 is 42.\n"  # stdout: the answer only
    progress = done.err.splitlines()
    first = progress.index(f"[step 1] thinking: {FIRST_THOUGHT}")
    assert progress[first + 1] == "[step 1] model calls multiply(a=6.0, b=7.0)"
    assert "[step 2] thinking: multiply returned 42. [redacted]" in progress
    assert "\x1b[" not in done.err  # not a terminal: the prefix marks it, no colour codes

    hidden = await towline("run", "frontier_agents:thinker", "What is 6 times 7?",
                           "--hide-thinking", "--task-queue", f"tq-{wid}", env=env)
    assert hidden.code == 0, hidden
    assert hidden.out == done.out
    assert "thinking" not in hidden.err and "[step 1] model calls multiply" in hidden.err

    shown = await towline("show", wid, env=env)
    assert shown.code == 0, shown
    assert (f"  thinking   {FIRST_THOUGHT}  (signature {SIGNATURE[:8]}…, {len(SIGNATURE)} chars)"
            in shown.out.splitlines())
    assert "  thinking   [redacted]  (signature cmVkYWN0ZWQ=)" in shown.out
    assert SIGNATURE not in shown.out  # abbreviated
    assert shown.out.index("thinking   The user asks") < shown.out.index("model      calls multiply")
    bare = await towline("show", wid, "--hide-thinking", env=env)
    assert "thinking" not in bare.out and "calls multiply" in bare.out
    whole = await towline("show", wid, "--json", env=env)
    parts = [p for m in json.loads(whole.out)["messages"] for p in m["parts"]]
    thoughts = [p for p in parts if p["part_kind"] == "thinking"]
    assert thoughts[0] == {"part_kind": "thinking", "content": FIRST_THOUGHT, "signature": SIGNATURE,
                           "redacted": False, "provider": "anthropic", "id": None}
    assert [t["redacted"] for t in thoughts] == [False, False, True]


async def test_watch_shows_streamed_and_recorded_thinking(
    client: Client, target: str, namespace: str
) -> None:
    env = _env(target, namespace)
    async with towline_worker(client, [thinker, stream_thinker, snapper]) as (tc, queue):
        streamed = await start_run(tc, stream_thinker, "hi", task_queue=queue)
        recorded = await start_run(tc, thinker, "What is 6 times 7?", task_queue=queue)
        snapped = await start_run(tc, snapper, "Show me camera 1", task_queue=queue)
        for handle in (streamed, recorded, snapped):
            await handle.result()
        watched = await towline("watch", streamed.id, env=env)
        as_json = await towline("watch", streamed.id, "--json", env=env)
        hidden = await towline("watch", streamed.id, "--hide-thinking", env=env)
        not_streamed = await towline("watch", recorded.id, env=env)
        pictured = await towline("watch", snapped.id, env=env)

    assert watched.code == 0, watched
    lines = watched.out.splitlines()
    at = lines.index("[step 1] thinking: Let me think.")
    assert lines[at:at + 3] == ["[step 1] thinking: Let me think.", "[step 1] thinking: It is 42.",
                                "[step 1] The answer is 42."]  # every line of thought marked
    assert "\x1b[" not in watched.out

    events = _json_lines(as_json.out)
    thought = [e for e in events if e["type"] == "thinking"]
    assert "".join(e["delta"] for e in thought) == "Let me think.\nIt is 42."  # its own kind
    assert all(e["step"] == 1 and e["attempt"] == 1 for e in thought)
    response = next(e for e in events if e["type"] == "response")
    assert response["thinking"] == "Let me think.\nIt is 42."
    assert response["text"] == "The answer is 42."

    assert hidden.code == 0 and "thinking" not in hidden.out and "[step 1] The answer is 42." in hidden.out

    assert not_streamed.code == 0, not_streamed
    assert f"[step 1] thinking: {FIRST_THOUGHT}" in not_streamed.out  # from the response event
    assert "[step 2] thinking: multiply returned 42." in not_streamed.out
    assert "[step 2] thinking: [redacted]" in not_streamed.out

    # a tool's image is named, never printed (the event carries no bytes either)
    assert pictured.code == 0, pictured
    assert (f"[step 1]   snapshot -> camera 1 [image/png, {len(SNAPSHOT)} bytes]  (succeeded)"
            in pictured.out.splitlines())
    assert len(pictured.out) < 2000


async def test_thinking_is_dimmed_on_a_terminal(target: str, namespace: str) -> None:
    master, slave = pty.openpty()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "towline.cli", "run", "frontier_agents:stream_thinker", "hi",
            "--task-queue", f"tq-{uuid.uuid4().hex[:8]}", cwd=REPO,
            env={**_env(target, namespace), "TERM": "xterm"}, start_new_session=True,
            stdin=slave, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    term = Terminal(proc, master)
    assert await term.wait() == 0, term.text
    assert f"{DIM}[step 1] thinking: Let me think." in term.text
    assert "\n[step 1] thinking: It is 42." in term.text
    assert "\n[step 1] The answer is 42." in term.text  # the answer is not dimmed


# --- attachments --------------------------------------------------------------------------------


def _is_reference(payload: Payload) -> bool:
    return payload.metadata.get("messageType") == REFERENCE and len(payload.external_payloads) == 1


async def test_attach_a_3_mb_image_through_the_payload_store(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    image = b"\x89PNG\r\n\x1a\n" + os.urandom(3_000_000)  # over Temporal's 2 MiB payload limit
    (tmp_path / "photo.bin").write_bytes(image)  # the type comes from the content, not the name
    (tmp_path / "notes.txt").write_text("Otters hold hands.\n")
    env = _env(target, namespace)
    wid = f"looker-{uuid.uuid4().hex[:8]}"
    store = tmp_path / "payloads"
    done = await towline("run", "frontier_agents:looker", "What are these?", "--attach", "photo.bin",
                         "--attach", "notes.txt", "--payload-store", f"file://{store}", "--id", wid,
                         "--task-queue", f"tq-{wid}", env=env, cwd=tmp_path)
    assert done.code == 0, done
    png = attachment_line(BinaryContent(data=image, media_type="image/png"))
    text = attachment_line(BinaryContent(data=b"Otters hold hands.\n", media_type="text/plain"))
    assert done.out == f"{png}; {text}\n"  # the model got both files, byte for byte

    events = await history_events(client.get_workflow_handle(wid))
    started = events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert _is_reference(started) and started.external_payloads[0].size_bytes > 4_000_000
    assert sum(e.ByteSize() for e in events) < 64_000  # references, not the image
    assert sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) > 4_000_000

    shown = await towline("show", wid, env={**env, "TOWLINE_PAYLOAD_STORE": f"file://{store}"})
    assert shown.code == 0, shown
    assert "  user       What are these? [image/png, 3000008 bytes] [text/plain, 19 bytes]" in shown.out


async def test_attachment_errors(target: str, namespace: str, tmp_path: Path) -> None:
    env = _env(target, namespace)
    missing = await towline("run", "frontier_agents:looker", "Look", "--attach", "nope.png",
                            env=env, cwd=tmp_path)
    assert_one_line_error(missing, 2, "cannot attach 'nope.png'", "No such file")
    (tmp_path / "blob.dat").write_bytes(b"\x00\x01\x02\x03 not a known format")
    unknown = await towline("run", "frontier_agents:looker", "Look", "--attach", "blob.dat",
                            env=env, cwd=tmp_path)
    assert_one_line_error(unknown, 2, "cannot attach 'blob.dat'", "PNG, JPEG")

    # without a payload store, the server refuses the input: said plainly, with the cure
    (tmp_path / "big.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(2_500_000))
    refused = await towline("run", "frontier_agents:looker", "Look", "--attach", "big.png",
                            "--task-queue", f"tq-{uuid.uuid4().hex[:8]}", env=env, cwd=tmp_path)
    assert_one_line_error(refused, 1, "cannot start the run", "2.5 MB of attached files",
                          "payload limit", "--payload-store file://DIR")
