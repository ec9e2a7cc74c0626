"""Retried model requests through the CLI as subprocesses against a live server: what
`towline run`, `towline watch` and `towline show` say about failed attempts, and the worker's
log (one line per failed attempt in the terminal, the traceback with `--verbose` and in the
log file). The fake provider answers through the official OpenAI SDK, its retries off."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from pathlib import Path

import pytest
from cli_helpers import cli_env, towline, towline_process
from fake_server import FakeProvider, Recorded, Reply
from openai_replies import completion
from provider_helpers import KEY
from readme import REPO, Done
from retry_agents import flaky
from temporalio.client import Client
from temporalio.service import RPCError

from towline.client import start_run
from towline.testing import towline_worker

pytestmark = pytest.mark.heavy

AGENTS = f"{REPO}:{REPO / 'tests'}:{REPO / 'tests' / 'providers'}"


def _env(target: str, namespace: str, provider: FakeProvider) -> dict[str, str]:
    return cli_env(target, namespace, {"PYTHONPATH": AGENTS, "OPENAI_BASE_URL": f"{provider.url}/v1",
                                       "OPENAI_API_KEY": KEY})


ERROR = {"error": {"message": "the server had an error", "type": "server_error", "param": None,
                   "code": None}}
"""What OpenAI answers with an HTTP 500."""


def _fail_twice(provider: FakeProvider, answer: str) -> None:
    provider.script(Reply(ERROR, status=500), Reply(ERROR, status=500), Reply(completion(answer)))


async def _started(client: Client, workflow_id: str) -> None:
    """Wait until the run exists."""
    async with asyncio.timeout(30):
        while True:
            try:
                await client.get_workflow_handle(workflow_id).describe()
                return
            except RPCError:
                await asyncio.sleep(0.1)


async def test_run_logs_one_line_per_failed_attempt_and_the_traceback_in_its_log_file(
    target: str, namespace: str, provider: FakeProvider, tmp_path: Path
) -> None:
    env = _env(target, namespace, provider)
    log = tmp_path / "logs" / "worker.log"
    _fail_twice(provider, "fine after all")
    done = await towline("run", "retry_agents:flaky", "hi", "--task-queue", f"q-{tmp_path.name}",
                         "--log-file", str(log), env=env)
    assert done.code == 0, done
    assert done.out.strip() == "fine after all"
    assert "Traceback" not in done.err
    # following its run, the command tells of each attempt once: its progress line, not also
    # the worker's log line
    told = [line for line in done.err.splitlines() if " model request attempt " in line]
    assert [line.split(" failed: ")[0] for line in told] == [
        "[step 1] model request attempt 1", "[step 1] model request attempt 2"], done.err
    assert "HTTP 500: openai: the server had an error" in told[0], told
    logged = log.read_text()
    assert logged.count("Traceback (most recent call last)") == 2, logged
    assert "the server had an error" in logged

    # --quiet prints no progress: the worker's one line per attempt says where the traceback is
    _fail_twice(provider, "quietly fine")
    quiet = await towline("run", "retry_agents:flaky", "hi", "--task-queue", f"q-{tmp_path.name}",
                          "--quiet", "--log-file", str(log), env=env)
    assert quiet.code == 0 and quiet.out.strip() == "quietly fine", quiet
    assert "Traceback" not in quiet.err
    failed = [line for line in quiet.err.splitlines() if line.startswith("towline: activity ")]
    assert len(failed) == 2, quiet.err
    assert "towline.model_request attempt 1 failed: HTTP500" in failed[0], failed
    assert "attempt 2 failed" in failed[1] and f"[traceback in {log}]" in failed[1], failed
    assert log.read_text().count("Traceback (most recent call last)") == 4

    _fail_twice(provider, "again fine")
    verbose = await towline("run", "retry_agents:flaky", "hi", "--task-queue",
                            f"q-{tmp_path.name}", "--verbose", "--stream", "--log-file", str(log),
                            env=env)
    assert verbose.code == 0, verbose
    assert verbose.err.count("Traceback (most recent call last)") == 2, verbose.err
    # streaming, the attempts are told of beside the run's events
    assert "[step 1] model request attempt 1 failed: HTTP 500: openai: the server had an error" \
        in verbose.err
    assert log.read_text().count("Traceback (most recent call last)") == 6


async def test_run_and_watch_show_each_failed_attempt_and_show_lists_them(
    client: Client, target: str, namespace: str, provider: FakeProvider, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(target, namespace, provider)
    for name, value in env.items():  # the worker here (it outlives `towline run`, for `watch`)
        monkeypatch.setenv(name, value)
    gate = threading.Event()  # the provider answers once the watcher is attached

    def first(_: Recorded) -> Reply:
        gate.wait(30)
        return Reply(ERROR, status=500)

    provider.script(first, Reply(ERROR, status=500), Reply(completion("fine after all")))
    async with towline_worker(client, [flaky]) as (_, queue):
        run = await towline_process("run", "retry_agents:flaky", "hi", "--no-worker",
                                    "--task-queue", queue, "--id", f"flaky-{tmp_path.name}",
                                    env=env)
        await _started(client, f"flaky-{tmp_path.name}")
        watching = await towline_process("watch", f"flaky-{tmp_path.name}", env=env)
        assert watching.stdout is not None
        header = await asyncio.wait_for(watching.stdout.readline(), 30)
        gate.set()
        (out, err), (watched, watch_err) = await asyncio.gather(
            asyncio.wait_for(run.communicate(), 60), asyncio.wait_for(watching.communicate(), 60))
    assert watching.returncode is not None
    watch = Done(watching.returncode, header.decode() + watched.decode(), watch_err.decode())
    assert run.returncode == 0, err.decode()
    assert out.decode().strip() == "fine after all"
    lines = [line for line in err.decode().splitlines() if line.startswith("[step 1] model")]
    assert lines[0].startswith("[step 1] model request attempt 1 failed: HTTP 500: openai: the "
                               "server had an error (server_error); retrying in "), err.decode()
    assert lines[0].endswith(" s") and lines[1].startswith("[step 1] model request attempt 2 "
                                                           "failed: HTTP 500"), lines
    assert lines[2] == "[step 1] model answers: fine after all", lines

    assert watch.code == 0, watch
    shown = watch.out.splitlines()
    assert any(line.startswith("[step 1] model request attempt 1 failed: HTTP 500: openai: the "
                               "server had an error") for line in shown), watch.out
    assert any(line.startswith("[step 1] model request attempt 2 failed") for line in shown)

    show = await towline("show", f"flaky-{tmp_path.name}", env=env)
    assert show.code == 0, show
    assert "Failed attempts (Temporal retried them):\n  [step 1] model request attempt 2 failed: " \
        "HTTP 500: openai: the server had an error (server_error) (retried)" in show.out, show.out
    data = json.loads((await towline("show", f"flaky-{tmp_path.name}", "--json", env=env)).out)
    [attempt] = data["failed_attempts"]
    assert attempt["step"] == 1 and attempt["attempt"] == 2 and attempt["what"] == "model request"
    assert attempt["failure_type"] == "HTTP500" and attempt["retried"] is True
    assert attempt["worker_lost"] is False


async def test_watch_json_and_show_of_a_live_run_being_retried(
    client: Client, target: str, namespace: str, provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """`watch --json` has each failed attempt (offset -1: not from the run's stream); `show`
    of the live run lists the pending activity's last failure."""
    env = _env(target, namespace, provider)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    attached, answered = threading.Event(), threading.Event()

    def first(_: Recorded) -> Reply:  # once `watch` is attached
        attached.wait(30)
        return Reply(ERROR, status=500)

    def second(_: Recorded) -> Reply:  # once `show` has seen attempt 1's failure
        answered.wait(30)
        return Reply(ERROR, status=500)

    provider.script(first, second, Reply(completion("later")))
    async with towline_worker(client, [flaky]) as (tc, queue):
        handle = await start_run(tc, flaky, "hi", task_queue=queue)
        watch = await towline_process("watch", handle.id, "--json", env=env)
        assert watch.stdout is not None
        header = await asyncio.wait_for(watch.stdout.readline(), 30)  # the `run` event
        attached.set()
        async with asyncio.timeout(30):
            while len(provider.requests) < 2:  # attempt 1 failed, attempt 2 is in flight
                await asyncio.sleep(0.05)
        show = await towline("show", handle.id, env=env)
        answered.set()
        rest, _ = await asyncio.wait_for(watch.communicate(), 60)
        assert (await handle.result()).output == "later"
    out = header + rest
    assert watch.returncode == 0
    events = [json.loads(line) for line in out.decode().splitlines()]
    failed = [e for e in events if e["type"] == "attempt_failed"]
    assert [(e["offset"], e["step"], e["attempt"]) for e in failed] == [(-1, 1, 1), (-1, 1, 2)]
    assert failed[0]["failure"] == "HTTP 500: openai: the server had an error (server_error)"
    assert failed[0]["what"] == "model request" and failed[0]["retried"] is True
    assert events[-1]["type"] == "result"
    # each next attempt published the failure before it on the run's stream as well
    retries = [e for e in events if e["type"] == "retry"]
    assert [(e["step"], e["attempt"], e["failure_type"]) for e in retries] == [
        (1, 1, "HTTP500"), (1, 2, "HTTP500")]
    assert all(e["offset"] >= 0 and not e["worker_lost"] for e in retries)
    assert retries[0]["failure"] == failed[0]["failure"]
    assert show.code == 0, show
    assert "Status    RUNNING" in show.out
    assert ("Failed attempts (Temporal retried them):\n  [step 1] model request attempt 1 failed: "
            "HTTP 500: openai: the server had an error (server_error) (retried)") in show.out


async def test_run_tells_of_a_retry_that_ran_between_two_polls(
    target: str, namespace: str, provider: FakeProvider, tmp_path: Path
) -> None:
    env = _env(target, namespace, provider)
    provider.script(Reply(ERROR, status=500), Reply(completion("at once")))
    done = await towline("run", "retry_agents:quick", "hi", "--task-queue", f"q-{tmp_path.name}",
                         env=env)
    assert done.code == 0, done
    # once, whether a poll saw the retry pending (`retrying now`) or the ended run's history
    # told of it (`retried`), and before the answer it led to
    told = [line for line in done.err.splitlines() if " model request attempt " in line]
    assert [line.rsplit("; ", 1)[0] for line in told] == [
        ("[step 1] model request attempt 1 failed: HTTP 500: openai: the server had an error "
         "(server_error)")], done.err
    assert done.err.index(told[0]) < done.err.index("[step 1] model answers: at once"), done.err


async def test_a_worker_killed_mid_request_shows_worker_lost(
    target: str, namespace: str, provider: FakeProvider, tmp_path: Path
) -> None:
    env = _env(target, namespace, provider)
    provider.script(Reply(completion("too late"), delay=30), Reply(completion("from the other")))
    queue = f"q-{tmp_path.name}"
    worker = ("worker", "--agent", "retry_agents:lost", "--task-queue", queue, "--log-file",
              str(tmp_path / "w.log"))
    first = await towline_process(*worker, env=env)
    run = await towline_process("run", "retry_agents:lost", "hi", "--no-worker", "--task-queue",
                                queue, "--id", f"lost-{tmp_path.name}", env=env)
    second = None
    try:
        async with asyncio.timeout(30):
            while len(provider.requests) < 1:  # the first worker's request is in flight
                await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        second = await towline_process(*worker, env=env)
        out, err = await asyncio.wait_for(run.communicate(), 60)
        # the run's stream has it too (the second attempt published it): read back by the worker
        watched = await towline("watch", f"lost-{tmp_path.name}", env=env)
        as_json = await towline("watch", f"lost-{tmp_path.name}", "--json", env=env)
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGINT)
                await proc.wait()
    assert run.returncode == 0, err.decode()
    assert out.decode().strip() == "from the other"
    lost = [line for line in err.decode().splitlines() if "worker lost" in line]
    assert len(lost) == 1, err.decode()
    assert lost[0].startswith("[step 1] worker lost; the request is retried elsewhere (model "
                              "request attempt 1: no heartbeat within its heartbeat timeout"), lost
    show = await towline("show", f"lost-{tmp_path.name}", "--json", env=env)
    [attempt] = json.loads(show.out)["failed_attempts"]
    assert attempt["worker_lost"] is True and attempt["failure_type"] == "timeout"
    assert watched.code == 0, watched
    assert "[step 1] worker lost; the request is retried elsewhere (model request attempt 1: no " \
        "heartbeat within its heartbeat timeout)" in watched.out.splitlines(), watched.out
    [retry] = [e for e in map(json.loads, as_json.out.splitlines()) if e["type"] == "retry"]
    assert retry["offset"] >= 0 and retry["step"] == 1 and retry["attempt"] == 1
    assert retry["worker_lost"] is True and retry["failure_type"] == "timeout"
