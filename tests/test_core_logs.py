"""The SDK core's warnings are log lines on stderr, never lines in a command's output.

A workflow task that fails (here: a hook past the 2 s deadlock detector, once) makes the
Rust core log a warning. Printed by the core itself it landed on standard output, in colour,
in the middle of `towline run --json`'s document; forwarded to Python's logging it is one
line on standard error and the output stays JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cli_helpers import cli_env, towline
from temporalio import workflow

from towline import Agent, Capability, ModelRequestState
from towline.models import TestModel

TESTS = Path(__file__).parent
BURN_SECONDS = 2.5
_burnt: list[bool] = []


class BurnsOnce(Capability):
    """Spins past the deadlock detector on the run's first model request only."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        if not _burnt:
            _burnt.append(True)
            with workflow.unsafe.sandbox_unrestricted():  # a fixed time, whatever the machine
                end = time.monotonic() + BURN_SECONDS
                while time.monotonic() < end:
                    pass
        return state


agent = Agent(name="burns-once", model=TestModel(custom_output_text="done"),
              capabilities=[BurnsOnce()])


async def test_a_failed_workflow_task_warns_on_stderr_and_json_stays_json(target: str) -> None:
    env = cli_env(target)
    env["PYTHONPATH"] = f"{TESTS}:{env['PYTHONPATH']}"
    done = await towline("run", "test_core_logs:agent", "go", "--json", env=env)
    assert done.code == 0, done
    result = json.loads(done.out)  # nothing but the result's document
    assert result["output"] == "done"
    # the core's warning about the failed task: one plain line on stderr, no colour codes
    warned = [line for line in done.err.splitlines() if "deadlock" in line.lower()]
    assert warned, done.err
    assert "\x1b[" not in done.out and "\x1b[" not in "\n".join(warned), done


async def test_a_program_calling_run_cli_gets_the_same_stdout(target: str) -> None:
    """`examples/vision.py` and `examples/research.py` run a command through `run_cli`, not the
    `towline` script: the core's warning must stay off their standard output too."""
    import asyncio
    import sys

    env = cli_env(target)
    env["PYTHONPATH"] = f"{TESTS}:{env['PYTHONPATH']}"
    program = ("import os, sys; from towline.cli import run_cli; "
               "code = run_cli(['run', 'test_core_logs:agent', 'go', '--json']); "
               "sys.stdout.flush(); sys.stderr.flush(); os._exit(code)")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, env={**env, "PYTHONHASHSEED": "0"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["output"] == "done"  # nothing but the result's document
    assert any("deadlock" in line.lower() for line in err.decode().splitlines()), err.decode()
