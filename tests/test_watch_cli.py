"""`towline watch` as a subprocess against a live server: reconnecting without duplicates or
gaps after the watching process is killed mid-run, Ctrl-C, exit codes and errors."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, cli_env, towline, towline_process
from streaming_agents import slow_writer
from temporalio.client import Client

from towline import Agent, Limits, ModelSettings, ToolCallPart, tool
from towline.client import start_run
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

pytestmark = pytest.mark.heavy


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def _lines(stream: asyncio.StreamReader | None, until: str, limit: float = 60) -> list[str]:
    """Read lines until one contains `until`."""
    assert stream is not None
    seen: list[str] = []
    async with asyncio.timeout(limit):
        while not seen or until not in seen[-1]:
            line = await stream.readline()
            assert line, f"the process ended before {until!r}: {seen}"
            seen.append(line.decode())
    return seen


async def test_a_killed_watcher_resumes_from_its_last_offset(
    client: Client, target: str, namespace: str
) -> None:
    agent = slow_writer("watch-resume", pace=0.4)  # text over 2.4 s, in several batches
    env = cli_env(target, namespace)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "write", task_queue=queue, id=f"resume-{queue}")
        first = await towline_process("watch", handle.id, "--json", env=env)
        try:
            got = await _lines(first.stdout, '"type": "text"')  # mid-run, text still coming
        finally:
            first.kill()  # SIGKILL: no goodbye, no flush beyond what was printed
            await first.wait()
        before = _json_lines("".join(got))
        last = before[-1]["offset"]
        resumed = await towline("watch", handle.id, "--json", "--from-offset", str(last + 1),
                                env=env)
        assert resumed.code == 0, resumed
        whole = await towline("watch", handle.id, "--json", env=env)
        assert (await handle.result()).output == "one two three four five six"

    after = _json_lines(resumed.out)
    everything = _json_lines(whole.out)
    assert after, "the run went on after the watcher died"
    assert before + after == everything  # no duplicate, no gap
    assert [e["offset"] for e in everything] == list(range(len(everything)))
    assert everything[-1]["type"] == "result"
    texts = "".join(e["delta"] for e in everything if e["type"] == "text")
    assert texts == "one two three four five six"


async def test_ctrl_c_stops_watching_and_says_where_to_resume(
    client: Client, target: str, namespace: str
) -> None:
    agent = slow_writer("watch-interrupt", pace=1.0)
    env = cli_env(target, namespace)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "write", task_queue=queue)
        proc = await towline_process("watch", handle.id, env=env)
        await _lines(proc.stdout, "Run ")
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        await handle.result()  # watching stopped; the run did not
    assert proc.returncode == 130
    assert f"resume with: towline watch {handle.id} --from-offset " in err.decode()


@tool
def broken(n: int) -> int:
    """Always fails for good."""
    raise RuntimeError("boom")


async def test_a_failed_run_is_shown_and_exits_1(client: Client, target: str, namespace: str) -> None:
    def calls(messages: list[Message], info: ModelInfo) -> Any:
        yield ToolCallPart(tool_name="broken", args={"n": 1}, tool_call_id=f"c{info.run_step}")

    agent = Agent(name="watch-fail", model=FunctionModel(calls, model_name="fails"), tools=[broken],
                  limits=Limits(max_steps=2), settings=ModelSettings(stream=True))
    env = cli_env(target, namespace)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        watched = await towline("watch", handle.id, env=env)
        as_json = await towline("watch", handle.id, "--json", env=env)
    assert watched.code == 1, watched
    assert "(unknown)" in watched.out  # the tool raised after it may have acted
    assert "Failed: UncertainToolEffect:" in watched.out
    assert as_json.code == 1
    assert _json_lines(as_json.out)[-1]["type"] == "failed"


async def test_bad_arguments_and_unknown_runs(target: str, namespace: str) -> None:
    env = cli_env(target, namespace)
    helped = await towline("watch", "--help", env=env)
    assert helped.code == 0 and "--from-offset" in helped.out and "--json" in helped.out
    negative = await towline("watch", "x", "--from-offset", "-1", env=env)
    assert negative.code == 2 and "is negative" in negative.err
    missing = await towline("watch", "no-such-run", env=env)
    assert_one_line_error(missing, 1, "no workflow 'no-such-run'")
    shown = await towline("show", "no-such-run", "--follow", env=env)
    assert_one_line_error(shown, 1, "no workflow 'no-such-run'")


async def test_a_finished_run_is_read_back_from_its_history_without_a_worker(
    client: Client, target: str, namespace: str
) -> None:
    """Once no worker for its agent answers, `towline watch` reads a finished run's events from
    its history (after `ENDED_WAIT`, not a query's timeout): the run's own events, as its stream
    has them but for the streamed text and the offsets, and a note saying so."""
    agent = slow_writer("watch-noworker", pace=0.01)
    env = cli_env(target, namespace)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "write", task_queue=queue)
        await handle.result()
        streamed = await towline("watch", handle.id, "--json", env=env)  # a worker reads it back
    assert streamed.code == 0, streamed
    read_back = await towline("watch", handle.id, "--json", env=env)
    assert read_back.code == 0, read_back
    assert_one_line_note(read_back, "has ended", f"task queue {queue!r}", "read from its history",
                         f"towline show {handle.id}")
    lifecycle = [{k: v for k, v in e.items() if k != "offset"} for e in _json_lines(streamed.out)
                 if e["type"] not in ("text", "thinking")]
    assert [{k: v for k, v in e.items() if k != "offset"} for e in _json_lines(read_back.out)] \
        == lifecycle
    assert [e["type"] for e in lifecycle] == ["run", "step", "response", "result"]
    assert {e["offset"] for e in _json_lines(read_back.out)} == {-1}  # not from a stream


def assert_one_line_note(done: Any, *fragments: str) -> None:
    """stderr is one `note:` line holding each fragment."""
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: "), done.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("flag", ["--no-stream", "--stream"])
async def test_run_stream_flags_decide_for_one_run(target: str, namespace: str, flag: str) -> None:
    """`towline run --no-stream` on an agent that streams shows each step once it is done;
    `--stream` shows the text as it comes."""
    done = await towline("run", "examples.research:agent", "Hello there", "--address", target,
                         "--namespace", namespace, flag, env=cli_env(target, namespace))
    assert done.code == 0, done
    assert done.out.startswith("Give me a URL or a file path")
    if flag == "--no-stream":
        assert "[step 1] model answers: Give me a URL" in done.err
    else:
        assert "[step 1] Give me a URL" in done.err
