"""User code raising `BaseException`s never kills, hangs or wedges the worker or the run.

A hook (model hook, middleware, `before_tool_execute`, a state reducer) or a tool (sync in a
thread, async, idempotent, run in the workflow) raising `SystemExit` (argparse's
`--limit lots`), `KeyboardInterrupt`, `GeneratorExit`, a bare `BaseException` or an
`asyncio.CancelledError` nobody asked for: the run ends typed (`CapabilityViolation` for hooks;
`UncertainToolEffect` for a non-idempotent tool, a `failed` return for an idempotent one), and
the one `towline worker` process serving them all keeps serving and still stops on SIGTERM
(real runs on the dev server, the worker a real subprocess).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
import pytest_asyncio
from audit_agents import agent
from cli_helpers import TESTS_ON_PATH, towline_process
from readme import cli_env
from temporalio.client import Client

from scripts import statuses
from towline.client import run, with_towline
from towline.errors import RunError
from towline.results import RunResult

RUN_TIMEOUT = 30.0
"""Long enough for a loaded machine; a wedged run waits it out (the failure seen before the fix)."""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(client: Client, target: str, namespace: str
                 ) -> AsyncIterator[tuple[Client, str, asyncio.subprocess.Process]]:
    """One `towline worker` subprocess for the module's runs."""
    queue = f"audit-{uuid4().hex[:8]}"
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH})
    proc = await towline_process("worker", "--agent", "audit_agents:agent", "--task-queue", queue,
                                 env=env)
    try:
        yield with_towline(client, [agent]), queue, proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _run(served: tuple[Client, str, asyncio.subprocess.Process], prompt: str) -> RunResult:
    tclient, queue, proc = served
    try:
        return await asyncio.wait_for(run(tclient, agent, prompt, task_queue=queue), RUN_TIMEOUT)
    except TimeoutError:
        raise AssertionError(f"{prompt!r}: no end within {RUN_TIMEOUT}s; worker "
                             f"{'exited rc ' + str(proc.returncode) if proc.returncode is not None else 'alive'}"
                             ) from None


HOOK_CASES = [
    ("before_model_request", kind)
    for kind in ("SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException", "CancelledError")
] + [("after_model", "SystemExit"), ("before_tool_execute", "KeyboardInterrupt"),
     ("reducer", "GeneratorExit"), ("after_model", "CancelledError")]


@pytest.mark.parametrize(("site", "kind"), HOOK_CASES)
async def test_a_hook_raising_a_base_exception_fails_the_run_typed(
    served: tuple[Client, str, asyncio.subprocess.Process], site: str, kind: str
) -> None:
    with pytest.raises(RunError) as info:
        await _run(served, f"{site} {kind}")
    err = info.value
    assert err.reason == "CapabilityViolation", err
    assert kind in err.message, err.message
    where = "state_schema['seen'] reducer" if site == "reducer" else site
    assert where in err.message or "reducer" in err.message, err.message
    assert err.partial is not None
    assert served[2].returncode is None, "the worker died"


@pytest.mark.parametrize(("site", "kind"), [
    ("sync_tool", "SystemExit"), ("sync_tool", "KeyboardInterrupt"), ("async_tool", "SystemExit"),
    ("async_tool", "CancelledError"), ("workflow_tool", "BaseException"),
])
async def test_a_non_idempotent_tool_raising_a_base_exception_is_an_uncertain_effect(
    served: tuple[Client, str, asyncio.subprocess.Process], site: str, kind: str
) -> None:
    with pytest.raises(RunError) as info:
        await _run(served, f"{site} {kind}")
    err = info.value
    assert err.reason == "UncertainToolEffect", err
    assert site in err.message and kind in err.message, err.message
    assert err.partial is not None and statuses(err.partial.messages) == {"c1": "unknown"}
    assert served[2].returncode is None, "the worker died"


async def test_an_idempotent_tool_raising_system_exit_is_a_failed_call(
    served: tuple[Client, str, asyncio.subprocess.Process],
) -> None:
    result = await _run(served, "idempotent_tool SystemExit")
    messages = result.messages
    assert statuses(messages) == {"c1": "failed"}
    assert "SystemExit" in str([p for m in messages for p in getattr(m, "parts", [])
                                if getattr(p, "tool_call_id", None) == "c1"])
    assert served[2].returncode is None, "the worker died"


async def test_the_worker_keeps_serving_and_stops_on_sigterm(
    served: tuple[Client, str, asyncio.subprocess.Process],
) -> None:
    result = await _run(served, "ok -")
    assert result.output == "done"
    proc = served[2]
    assert proc.returncode is None
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        raise AssertionError("the worker ignored SIGTERM") from None
