"""Retried model requests through the CLI as subprocesses against a live server: what
`towline run`, `towline watch` and `towline show` say about failed attempts, and the worker's
log (one line per failed attempt in the terminal, the traceback with `--verbose` and in the
log file). The fake provider answers through the official OpenAI SDK, its retries off."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import cli_env, towline
from fake_server import FakeProvider, Reply
from openai_replies import completion
from provider_helpers import KEY
from readme import REPO

AGENTS = f"{REPO}:{REPO / 'tests'}:{REPO / 'tests' / 'providers'}"


def _env(target: str, namespace: str, provider: FakeProvider) -> dict[str, str]:
    return cli_env(target, namespace, {"PYTHONPATH": AGENTS, "OPENAI_BASE_URL": f"{provider.url}/v1",
                                       "OPENAI_API_KEY": KEY})


def _fail_twice(provider: FakeProvider, answer: str) -> None:
    error = {"error": {"message": "the server had an error", "type": "server_error",
                       "param": None, "code": None}}
    provider.script(Reply(error, status=500), Reply(error, status=500), Reply(completion(answer)))


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
    failed = [line for line in done.err.splitlines() if line.startswith("towline: activity ")]
    assert len(failed) == 2, done.err
    assert "towline.model_request attempt 1 failed: HTTP500" in failed[0], failed
    assert "attempt 2 failed" in failed[1] and f"[traceback in {log}]" in failed[1], failed
    logged = log.read_text()
    assert logged.count("Traceback (most recent call last)") == 2, logged
    assert "the server had an error" in logged

    _fail_twice(provider, "again fine")
    verbose = await towline("run", "retry_agents:flaky", "hi", "--task-queue",
                            f"q-{tmp_path.name}", "--verbose", "--log-file", str(log), env=env)
    assert verbose.code == 0, verbose
    assert verbose.err.count("Traceback (most recent call last)") == 2, verbose.err
    assert log.read_text().count("Traceback (most recent call last)") == 4
