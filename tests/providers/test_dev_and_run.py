"""`towline dev` in one terminal and `towline run` in another, as the quickstart has a user do
(issue 30 items 1 and 4), through the CLI as subprocesses against the live server dev starts.

`towline run`'s in-process worker polls a task queue of its own, so dev's worker cannot take
its runs: a run of an agent dev does not serve, and a run on a model dev does not allow, both
complete. A run sent to dev's queue on purpose (`--task-queue`, `--no-worker`) fails with an
error naming the worker that took it, the queue, what that worker serves and the flag that
fixes it. The model override is docs/models.md's command for a keyless local server, run as
written against a fake OpenAI-compatible server on a free loopback port.
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

from cli_helpers import towline, towline_process
from fake_server import FakeProvider, Reply
from openai_replies import completion
from ports import free_port
from readme import cli_env, read_until, readme

from towline.activities.providers._common import LOCAL_PLACEHOLDER_KEY

DEV_AGENTS = "calculator, calculator-test, careful-calculator"
"""What `towline dev --agent examples.calculator:agents` serves."""
TAKEN_BY = re.compile(r"on worker \d+@\S+, which took this run's task from queue 'towline' and "
                      rf"serves agents {DEV_AGENTS} \(models: their own, calculator-offline")
"""How a failure names dev's worker: its identity (pid@host), the queue, its agents and models."""


async def test_towline_run_beside_towline_dev_runs_its_own_runs(
    tmp_path: Path, provider: FakeProvider
) -> None:
    dev = await towline_process("dev", "--agent", "examples.calculator:agents", "--port",
                                str(free_port()), "--ui-port", str(free_port()),
                                env=cli_env(), cwd=tmp_path)
    try:
        said = await read_until(dev.stderr, "Ctrl-C stops.")
        match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
        assert match and "agents: calculator, careful-calculator, calculator-test" in said, said
        env = cli_env(match.group(1))
        env.pop("OPENAI_API_KEY", None)  # a local server takes none

        # another agent than dev serves: the command's own worker runs it
        other = await towline("run", "examples.support:agent", "Where is my order A1?",
                              env=env, cwd=tmp_path)
        assert other.code == 0, other
        assert other.out == ("Here is what I found: order A1: delivered on Monday, charged "
                             "25 EUR\n")
        assert re.search(r"task queue towline-run-[0-9a-f]{12} \(this command's own\)", other.err)

        # a fork of a run on such a queue goes to the fleet's, where dev's worker runs it
        own = await towline("run", "examples.calculator:agent", "What is 6 times 7?", "--id",
                            "calc-own", env=env, cwd=tmp_path)
        assert own.code == 0 and "(this command's own)" in own.err, own
        forked = await towline("fork", "calc-own", "--at-step", "1", "--wait", env=env,
                               cwd=tmp_path)
        assert forked.code == 0 and forked.out == "6 times 7 is 42.\n", forked
        assert "(agent calculator, task queue towline)" in forked.err
        # a reset one stays on it: the command says which worker would serve it
        reset = await towline("reset", "calc-own", "--to-step", "2", "--yes", env=env, cwd=tmp_path)
        assert reset.code == 0, reset
        assert re.search(r"note: task queue 'towline-run-[0-9a-f]{12}' was one towline run "
                         r"command's own; the run goes on when a worker polls it \(towline "
                         r"worker --agent MODULE:ATTR --task-queue towline-run-[0-9a-f]{12}\)",
                         reset.err), reset.err

        # a model dev does not allow: docs/models.md's command for a local server, as written
        provider.script(Reply(completion("6 times 7 is 42.", model="qwen")))
        local = await readme('towline run examples.calculator:agent "What is 6 times 7?" '
                             "--model openai:qwen",
                             env={**env, "OPENAI_BASE_URL": f"{provider.url}/v1"}, cwd=tmp_path)
        assert local.code == 0, local
        assert local.out == "6 times 7 is 42.\n"
        assert "model openai:qwen, task queue towline-run-" in local.err
        assert "cost no price known (1 request)" in local.err  # no price of a local model
        [request] = provider.requests
        assert request.body["model"] == "qwen"
        assert request.headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"

        # sent to dev's queue on purpose: dev's worker takes it, and the error says so
        shadowed = await towline("run", "examples.support:agent", "Where is my order A1?",
                                 "--task-queue", "towline", env=env, cwd=tmp_path)
        assert shadowed.code == 1 and shadowed.out == "", shadowed
        assert "failed: UnknownAgent: no agent named 'support-triage' is registered " in shadowed.err
        assert TAKEN_BY.search(shadowed.err), shadowed.err
        assert ("Serve it there (towline worker --agent MODULE:ATTR --task-queue towline), or "
                "start the run on a queue whose workers serve it (--task-queue; `towline run` "
                "without --task-queue and --no-worker runs it on a queue of its own)") in shadowed.err

        refused = await towline("run", "examples.calculator:agent", "What is 6 times 7?",
                                "--model", "openai:qwen", "--no-worker", env=env, cwd=tmp_path)
        assert refused.code == 1, refused
        assert "failed: InvalidRunInput: model 'openai:qwen' is not allowed " in refused.err
        assert TAKEN_BY.search(refused.err), refused.err
        assert "allow it there with --allow-model PATTERN (towline worker or towline dev)" in refused.err
        assert len(provider.requests) == 1  # refused before any model request
    finally:
        if dev.returncode is None:
            dev.send_signal(signal.SIGINT)
        await asyncio.wait_for(dev.wait(), 60)
    assert dev.returncode == 0
