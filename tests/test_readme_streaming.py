"""The README's "Watching runs live" commands, run exactly as written, in terminals.

`towline run` runs in a pseudo-terminal, as a person would see it: the model's text arrives
in pieces, over time, and each tool call shows as it starts and ends. A second terminal's
`towline watch` follows the same run live; the approval from a third lets it go on. Then the
same run is read back as JSON from an offset, and with `towline show --follow`; and the
README's web backend is the file `examples/sse.py` as the README shows it.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path

from readme import (
    REPO,
    cli_env,
    read_until,
    readme,
    readme_process,
    readme_pty,
    stop_process,
)

NOTES = "# Notes\n\nSea otters hold hands while they sleep, and keep a favourite stone in a pocket.\n"
STEP_2 = "[step 2] Here is what I found:"


async def _dev(cwd: Path) -> tuple[asyncio.subprocess.Process, str]:
    proc = await readme_process("towline dev --agent examples.research:agent", env=cli_env(), cwd=cwd)
    said = await read_until(proc.stderr, "Ctrl-C stops.")
    match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
    assert match, said
    assert "agents: research" in said
    return proc, match.group(1)


async def test_run_streams_in_a_terminal_and_watch_shows_the_same_run(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(NOTES)  # what "Summarise README.md" reads
    dev, address = await _dev(tmp_path)
    env = cli_env(address)
    watcher: asyncio.subprocess.Process | None = None
    try:
        term = await readme_pty(
            'towline run examples.research:agent "Summarise README.md" --id research-1 --no-worker',
            env=env, cwd=tmp_path)
        shown = await term.read_until("towline approve research-1 read_0")
        assert "[step 1] Let me look." in shown
        assert '[step 1] model calls read_file(path="README.md")' in shown

        # a second terminal attaches to the running run and catches up
        watcher = await readme_process("towline watch research-1", env=env, cwd=tmp_path)
        caught_up = await read_until(watcher.stdout, "towline approve research-1 read_0")
        assert caught_up.startswith("Run research-1: agent research, model research-offline, streaming")

        approved = await readme("towline approve research-1 read_0", env=env, cwd=tmp_path)
        assert approved.code == 0, approved
        assert await term.wait() == 0, term.text
        out, err = await asyncio.wait_for(watcher.communicate(), 60)
        assert watcher.returncode == 0, err.decode()
    finally:
        if watcher is not None:
            stop_process(watcher, signal.SIGKILL)
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 60)

    text = term.text
    for line in ("call read_0 approved", "[step 1]   read_file started  (call id read_0)",
                 "[step 1]   read_file -> # Notes Sea otters hold hands",
                 "Done: 2 steps, 1 tool call, 2 model requests"):
        assert line in text, text
    answer = ("Here is what I found:\n- read_file: 89 characters; it begins: # Notes Sea otters "
              "hold hands while they sleep, and keep a favourite stone in a pocket.")
    assert text.index("read_file started") < text.index("read_file ->") < text.index(STEP_2)
    assert answer in text  # streamed (stderr), then the answer itself (stdout)
    # the answer's text arrived in pieces, over time: not in one write
    start = next(t for t, _ in _upto(term.chunks, STEP_2))
    end = next(t for t, _ in _upto(term.chunks, "in a pocket."))
    assert end - start >= 0.2, term.chunks

    watched = caught_up + out.decode()
    assert "[user] Summarise README.md" in watched
    for line in ("[step 1] Let me look.", "call read_0 approved",
                 "[step 1]   read_file started  (call id read_0)", answer,
                 "Done: 2 steps, 1 tool call, 2 model requests"):
        assert line in watched, watched


def _upto(chunks: list[tuple[float, str]], marker: str) -> list[tuple[float, str]]:
    """The chunk by which the terminal has shown `marker` (the first such)."""
    seen = ""
    for t, c in chunks:
        seen += c.replace("\r\n", "\n")
        if marker in seen:
            return [(t, c)]
    raise AssertionError(f"{marker!r} never shown")


async def test_watch_json_from_an_offset_and_show_follow(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(NOTES)
    dev, address = await _dev(tmp_path)
    env = cli_env(address)
    try:
        term = await readme_pty(
            'towline run examples.research:agent "Summarise README.md" --id research-1 --no-worker',
            env=env, cwd=tmp_path)
        await term.read_until("towline approve research-1 read_0")
        assert (await readme("towline approve research-1 read_0", env=env, cwd=tmp_path)).code == 0
        assert await term.wait() == 0

        done = await readme("towline watch research-1 --json --from-offset 5", env=env, cwd=tmp_path)
        assert done.code == 0, done
        events = [json.loads(line) for line in done.out.splitlines()]
        assert [e["offset"] for e in events] == list(range(5, 5 + len(events)))
        assert events[-1]["type"] == "result"
        texts = [e for e in events if e["type"] == "text" and e["step"] == 2]
        assert len(texts) >= 2 and all(e["attempt"] == 1 for e in texts)
        assert "".join(e["delta"] for e in texts) == next(
            e for e in events if e["type"] == "response" and e["step"] == 2)["text"]

        followed = await readme("towline show research-1 --follow", env=env, cwd=tmp_path)
        assert followed.code == 0, followed
        assert followed.out.startswith("Run research-1: agent research")
        assert "call read_0 approved" in followed.out and "Done: 2 steps" in followed.out
    finally:
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 60)


def test_the_readme_shows_the_web_backend_as_it_is() -> None:
    readme_text = (REPO / "docs" / "watching.md").read_text()
    source = (REPO / "examples" / "sse.py").read_text()
    shown = source[source.index("import json"):]
    assert f"```python\n{shown}```" in readme_text
    assert len(shown.splitlines()) <= 32
