"""The `towline` command, run as a real subprocess against real Temporal servers.

Most tests point the CLI at the session's dev server through `TEMPORAL_ADDRESS`; one
lets `towline run` start its own embedded server (nothing answers at the configured
address) and then serves the same SQLite state with `towline dev`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import towline_process
from ports import free_port
from temporalio.client import Client, WorkflowHandle

from examples.calculator import agent as calculator
from examples.calculator import arithmetic_model, multiply
from towline import Agent, Capability, ToolCall, ToolContext, ToolDenied
from towline.cli import run_cli
from towline.cli.common import port_free
from towline.client import start_run
from towline.devserver import temporal_binary
from towline.devserver.ui_registry import recorded_ui
from towline.messages import ModelRequest, ToolReturnPart
from towline.models import FunctionModel
from towline.results import RunResult
from towline.testing import towline_worker
from towline.workflows import current_run

REPO = Path(__file__).resolve().parent.parent
COMMANDS = ("dev", "worker", "run", "show", "runs", "pending", "approve", "reject", "send", "cancel")


@dataclass
class Done:
    """A finished CLI process."""

    code: int
    out: str
    err: str


def _env(address: str, namespace: str = "default") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TOWLINE_"))}
    env["TEMPORAL_ADDRESS"] = address
    env["TEMPORAL_NAMESPACE"] = namespace
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


async def towline(*args: str, env: dict[str, str], cwd: Path = REPO, timeout: float = 60) -> Done:
    """Run `python -m towline.cli ARGS` and wait for it."""
    proc = await towline_process(*args, env=env, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(), err.decode())


def assert_one_line_error(done: Done, code: int, *fragments: str) -> None:
    """A failure the user sees as a single `towline: error:` line, never a traceback."""
    assert done.code == code, done
    assert "Traceback" not in done.err
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    assert lines[0].startswith("towline: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def _wid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- runs against the session server -------------------------------------------------------


async def test_run_prints_answer_and_ui_address_then_show_prints_counters(
    target: str, namespace: str, task_queue: str
) -> None:
    env = _env(target, namespace)
    wid = _wid("cli-run")
    done = await towline("run", "examples.calculator:agent", "What is 6 times 7?",
                         "--task-queue", task_queue, "--id", wid, env=env)
    assert done.code == 0, done
    assert done.out == "6 times 7 is 42.\n"  # stdout carries only the answer
    port = int(target.rsplit(":", 1)[1])
    url = f"http://localhost:{port + 1000}/namespaces/{namespace}/workflows/{wid}"
    assert f"UI: {url}" in done.err
    assert "[step 1] model calls multiply(a=6.0, b=7.0)" in done.err
    assert "multiply -> 42  (succeeded)" in done.err

    shown = await towline("show", wid, env=env)
    assert shown.code == 0, shown
    assert "Status    COMPLETED" in shown.out
    assert "run_step             2   (max_steps 50)" in shown.out
    assert "tool_calls           1" in shown.out
    assert "requests             2" in shown.out
    assert "user       What is 6 times 7?" in shown.out
    assert "succeeded: 42" in shown.out
    assert "model      6 times 7 is 42." in shown.out


async def test_run_failure_prints_reason_and_exits_1(
    target: str, namespace: str, task_queue: str, tmp_path: Path
) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("What is 6 times 7?\n")
    done = await towline("run", "examples.calculator:agent", "--prompt-file", str(prompt),
                         "--max-steps", "1", "--task-queue", task_queue, env=_env(target, namespace))
    assert done.code == 1, done
    assert done.out == ""
    assert "failed: MaxStepsExceeded: max_steps 1 reached" in done.err
    assert "Traceback" not in done.err


async def test_temporal_cli_starts_a_run_that_completes(
    client: Client, target: str, namespace: str, task_queue: str
) -> None:
    wid = _wid("temporal-cli")
    async with towline_worker(client, [calculator], task_queue=task_queue) as (tclient, _):
        proc = await asyncio.create_subprocess_exec(
            str(temporal_binary()), "workflow", "start", "--type", "AgentRun",
            "--task-queue", task_queue, "--workflow-id", wid,
            "--input", '{"agent": "calculator", "prompt": "What is 6 times 7?"}',
            "--address", target, "--namespace", namespace,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, (out, err)
        handle = tclient.get_workflow_handle(wid, result_type=RunResult)
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.output == "6 times 7 is 42."
    assert result.counters.tool_calls == 1


# --- approvals ---------------------------------------------------------------------------


class AskFirst(Capability):
    """Every tool call waits for `towline approve` / `towline reject`."""

    async def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        run = current_run()
        decision = await run.request_approval(ctx, call, timedelta(seconds=60))
        if decision is None or not run.is_approved(call.tool_call_id):
            raise ToolDenied(decision.reason if decision and decision.reason else "rejected")
        return call


approval_agent = Agent(
    name="cli-approval-calculator",
    model=FunctionModel(arithmetic_model, model_name="cli-approval-arithmetic"),
    tools=[multiply],
    capabilities=[AskFirst()],
)


async def _pending_call(handle: WorkflowHandle[Any, Any]) -> str:
    for _ in range(200):
        state: dict[str, Any] = await handle.query("state")
        pending: dict[str, Any] = state.get("pending_approvals") or {}
        if pending:
            return next(iter(pending))
        await asyncio.sleep(0.05)
    raise AssertionError("no tool call became pending")


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_approve_or_reject_a_waiting_tool_call(
    client: Client, target: str, namespace: str, decision: str
) -> None:
    env = _env(target, namespace)
    async with towline_worker(client, [approval_agent]) as (tclient, queue):
        handle = await start_run(tclient, approval_agent, "What is 6 times 7?", task_queue=queue)
        call_id = await _pending_call(handle)

        shown = await towline("show", handle.id, env=env)
        assert shown.code == 0, shown
        assert "Run state waiting" in shown.out
        # the arguments as validated against the schema (floats), which is what would run
        assert f"Waiting for approval: multiply(a=6.0, b=7.0)  call id {call_id}" in shown.out

        unknown = await towline(decision, handle.id, "no-such-call", env=env)
        assert_one_line_error(unknown, 1, "no tool call 'no-such-call' is waiting for approval")

        done = await towline(decision, handle.id, call_id, "--reason", "checked by a test",
                             env=env)
        assert done.code == 0, done
        assert call_id in done.out
        result: RunResult = await asyncio.wait_for(handle.result(), 30)
    returns = [p for m in result.messages if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(returns) == 1
    if decision == "approve":
        assert returns[0].status == "succeeded"
        assert result.output == "6 times 7 is 42."
    else:
        assert returns[0].status == "denied"
        assert result.output == "I could not compute that: checked by a test."

    again = await towline(decision, handle.id, call_id, env=env)
    assert_one_line_error(again, 1, handle.id)


# --- help and one-line errors ------------------------------------------------------------


async def test_help_works_for_the_script_and_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    script = Path(sys.executable).parent / "towline"
    proc = await asyncio.create_subprocess_exec(
        str(script), "--help", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command in out.decode()
    for command in COMMANDS:
        assert run_cli([command, "--help"]) == 0
        printed = capsys.readouterr().out
        assert printed.startswith(f"usage: towline {command}")


async def test_missing_module_is_a_one_line_error(target: str) -> None:
    done = await towline("run", "no_such_module_xyz:agent", "hello", env=_env(target))
    assert_one_line_error(done, 2, "no module named 'no_such_module_xyz'")


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        (["run", "examples.calculator:nothing", "hi"], 2, "has no attribute 'nothing'"),
        (["run", "examples.calculator:multiply", "hi"], 2, "is a Tool, not a towline Agent"),
        (["run", "examples.calculator", "hi"], 2, "is not of the form module:attr"),
        (["run", "examples.calculator:agent", "--prompt-file", "/no/such/file"], 2,
         "cannot read prompt file '/no/such/file'"),
        (["run", "examples.calculator:agent", "  "], 2, "the prompt is empty"),
        (["worker", "--agent", "no_such_module_xyz:agent"], 2, "no module named"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    argv: list[str], code: int, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(argv) == code
    captured = capsys.readouterr()
    assert_one_line_error(Done(code, captured.out, captured.err), code, fragment)


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "some-run"],
        ["approve", "some-run", "call-1"],
        ["worker", "--agent", "examples.calculator:agent"],
    ],
)
def test_unreachable_server_is_a_one_line_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    assert run_cli(argv) == 1
    captured = capsys.readouterr()
    assert_one_line_error(Done(1, captured.out, captured.err), 1,
                          f"cannot reach the Temporal server at {address}")


# --- the embedded server -----------------------------------------------------------------


async def _started(proc: asyncio.subprocess.Process) -> str:
    """Read `towline dev` stderr until it says it is serving; returns what it said."""
    assert proc.stderr is not None
    said = ""
    while "Ctrl-C stops." not in said:
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        assert line, f"towline dev exited early: {said}"
        said += line.decode()
    return said


async def test_run_without_a_server_embeds_one_and_dev_serves_its_state(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = _env(f"127.0.0.1:{port}")
    wid = _wid("embedded")
    done = await towline("run", "examples.calculator:agent", "What is 6 times 7?", "--id", wid,
                         "--ui-port", str(ui_port), env=env, cwd=tmp_path, timeout=90)
    assert done.code == 0, done
    assert done.out == "6 times 7 is 42.\n"
    assert f"No Temporal server at 127.0.0.1:{port}; starting an embedded one" in done.err
    assert f"UI: http://localhost:{ui_port}/namespaces/default/workflows/{wid}" in done.err
    assert (tmp_path / ".towline" / "temporal.db").is_file()
    assert port_free(port)  # the embedded server stopped with the command
    assert recorded_ui(port) is None  # and its UI's entry went with it

    # `towline dev` serves the same SQLite state: the earlier run is still there, and its
    # worker runs new ones.
    dev_port, dev_ui = free_port(), free_port()
    assert dev_ui != dev_port + 1000
    dev_env = _env(f"127.0.0.1:{dev_port}")
    proc = await towline_process("dev", "--agent", "examples.calculator:agent", "--port",
                                 str(dev_port), "--ui-port", str(dev_ui), cwd=tmp_path, env=dev_env)
    try:
        said = await _started(proc)
        assert f"Temporal server  127.0.0.1:{dev_port}" in said
        assert "agents: calculator" in said
        shown = await towline("show", wid, env=dev_env, cwd=tmp_path)
        assert shown.code == 0, shown
        assert "Status    COMPLETED" in shown.out
        assert "6 times 7 is 42." in shown.out
        # links go to the UI's own port, which is not the gRPC port + 1000 here
        assert f"http://localhost:{dev_ui}/namespaces/default/workflows/{wid}" in shown.out
        second = await towline("run", "examples.calculator:agent", "What is 2 plus 3?",
                               "--no-worker", env=dev_env, cwd=tmp_path)
        assert second.code == 0, second
        assert second.out == "2 plus 3 is 5.\n"
        assert f"UI: http://localhost:{dev_ui}/namespaces/default/workflows/" in second.err
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0
    assert port_free(dev_port)
    assert recorded_ui(dev_port) is None  # the stopped server's UI is forgotten
