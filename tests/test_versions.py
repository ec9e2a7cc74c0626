"""Agent versions and replay checks: what a deploy needs to know about runs in flight.

A run records the version of its agent's definition when it starts (ledger memo,
`TowlineAgentVersion`, a `workflow.patched` marker). A worker whose definition differs
fails the workflow task of such a run instead of silently replaying it with other code,
until a worker that has (or accepts) the version picks it up. `towline replay` replays
recorded runs against local code and tells a compatible change from an incompatible one.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import json_of, towline, until
from pydantic import BaseModel
from readme import REPO, cli_env
from replay_agents import compatible, incompatible, original
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from towline import Agent, Limits, ModelSettings, tool
from towline.capabilities import HistoryWindow, ToolApproval
from towline.client import run
from towline.results import RunInput, RunResult
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import counters_from_history
from towline.testing import assert_replays, load_history, replay_runs, towline_worker

pytestmark = pytest.mark.heavy

TESTS_ON_PATH = {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}


# --- the fingerprint ------------------------------------------------------------------------------


def test_the_version_is_the_same_in_every_process() -> None:
    code = ("from towline.runtime.fingerprint import agent_version; import examples.calculator as c; "
            "print(' '.join(agent_version(a) for a in c.agents))")
    seen = {
        subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, text=True,
                       capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2", "random")
    }
    from examples.calculator import agents

    assert seen == {" ".join(agent_version(a) for a in agents) + "\n"}


class Answer(BaseModel):
    text: str


@tool
def other(x: int) -> int:
    """Another tool."""
    return x


def test_the_version_follows_what_decides_a_runs_commands() -> None:
    base: dict[str, Any] = {"name": "v", "tools": [other],
                            "capabilities": [HistoryWindow(max_messages=4)]}
    version = agent_version(Agent(**base))
    assert len(version) == 12 and version == agent_version(Agent(**base))
    changed = {
        "model": {"model": "openai:gpt-4.1"},
        "tools": {"tools": []},
        "capability config": {"capabilities": [HistoryWindow(max_messages=5)]},
        "capability added": {"capabilities": [HistoryWindow(max_messages=4),
                                              ToolApproval(tools=["other"])]},
        "output type": {"output_type": Answer},
        "limits": {"limits": Limits(max_steps=3)},
    }
    for what, change in changed.items():
        assert agent_version(Agent(**{**base, **change})) != version, what
    same = {"instructions": {"instructions": "Be brief."},
            "settings": {"settings": ModelSettings(temperature=0.1)},
            "timeouts": {"model_timeout": timedelta(minutes=1)}}
    for what, change in same.items():
        assert agent_version(Agent(**{**base, **change})) == version, what
    assert agent_version(compatible) != agent_version(original)


# --- recorded at run start --------------------------------------------------------------------


async def test_a_run_records_its_agent_version_and_runs_lists_by_it(
    client: Client, target: str, namespace: str
) -> None:
    version = agent_version(original)
    async with towline_worker(client, [original]) as (tc, queue):
        result = await run(tc, original, "weather?", task_queue=queue)
    assert result.counters.agent_version == version
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    assert {c.agent_version for c in counters_from_history(history.events)} == {version}

    env = cli_env(target, namespace)
    query = f'WorkflowId = "{result.run_id}"'
    done = await until(lambda: towline("runs", "--version", version, "--query", query,
                                       "--json", env=env),
                       lambda d: d.code == 0 and len(json.loads(d.out)) == 1, "the run by version")
    assert json_of(done)[0]["agent_version"] == version
    table = await towline("runs", "--version", version, "--query", query, env=env)
    assert table.out.splitlines()[1].split()[-1] == version
    other_version = await towline("runs", "--version", "000000000000", "--query", query, env=env)
    assert other_version.out == "No runs match.\n"


# --- a worker with another definition ----------------------------------------------------------


async def _task_failures(handle: WorkflowHandle[Any, Any]) -> list[str]:
    history = await handle.fetch_history()
    return [e.workflow_task_failed_event_attributes.failure.message for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]


async def test_a_worker_without_the_runs_version_fails_its_task_until_one_accepts_it(
    client: Client, target: str, namespace: str
) -> None:
    queue = f"tq-versions-{uuid.uuid4().hex[:8]}"
    old, new = agent_version(original), agent_version(compatible)
    async with towline_worker(client, [original], task_queue=queue) as (tc, _):
        handle = await tc.start_workflow(
            "AgentRun", RunInput(agent="replay-demo", prompt="weather?", session=True,
                                 session_timeout=timedelta(seconds=3)),
            id=f"versions-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=RunResult)
        for _ in range(400):
            state: dict[str, Any] = await handle.query("state")
            if state["status"] == "waiting":
                break
            await asyncio.sleep(0.05)
    # The new definition is deployed; the session's timer fires and it must replay the run.
    async with towline_worker(client, [compatible], task_queue=queue, max_cached_workflows=0):
        failures: list[str] = []
        for _ in range(600):
            failures = await _task_failures(handle)
            if failures:
                break
            await asyncio.sleep(0.1)
        assert failures, "the workflow task never failed"
        assert f"another version of agent 'replay-demo' than this worker's ({new}" in failures[0]
        env = cli_env(target, namespace)
        stuck = json_of(await until(
            lambda: towline("runs", "--stuck", "--query", f'WorkflowId = "{handle.id}"',
                            "--json", env=env),
            lambda d: d.code == 0 and len(json.loads(d.out)) == 1, "the stuck run"))
        assert stuck[0]["agent_version"] == old and "AgentVersionMismatch" not in stuck[0]["cause"]
        assert "another version of agent" in stuck[0]["failure"]
    # A worker that accepts the old version (its runs replay: see the next test) finishes it.
    async with towline_worker(client, [compatible], task_queue=queue, accept_versions=[old]):
        result = await asyncio.wait_for(handle.result(), 120)
    assert result.output == "it is sunny in Oslo"
    assert result.counters.agent_version == old  # the version the run started with


# --- towline replay ---------------------------------------------------------------------------


async def test_towline_replay_passes_a_compatible_change_and_catches_an_incompatible_one(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    prefix = f"replay-{uuid.uuid4().hex[:8]}"
    async with towline_worker(client, [original]) as (tc, queue):
        for n in range(2):
            await run(tc, original, "weather?", task_queue=queue, id=f"{prefix}-{n}")
    env = cli_env(target, namespace, extra=TESTS_ON_PATH)
    query = f'WorkflowId STARTS_WITH "{prefix}"'

    same = await until(lambda: towline("replay", "--agent", "replay_agents:original",
                                       "--query", query, env=env),
                       lambda d: "2 replayed" in d.out, "both runs")
    assert same.code == 0, same
    assert same.out.count("ok      ") == 2 and f"version {agent_version(original)}" in same.out

    ok = await towline("replay", "--agent", "replay_agents:compatible", "--query", query, env=env)
    assert ok.code == 0, ok
    lines = ok.out.splitlines()
    assert lines[-1] == "2 replayed: 2 ok, 0 failed"
    assert all(line.startswith(f"ok      {prefix}-") for line in lines[:2])
    assert (f"version {agent_version(original)} -> {agent_version(compatible)}: compatible "
            f"(workers accept it with --accept-version {agent_version(original)})") in lines[0]

    bad = await towline("replay", "--agent", "replay_agents:incompatible", "--query", query,
                        env=env)
    assert bad.code == 1, bad
    assert bad.out.count("FAILED  ") == 2 and "nondeterminism: " in bad.out
    assert bad.out.splitlines()[-1].startswith("2 replayed: 0 ok, 2 failed")

    # A history exported with the temporal CLI, replayed from its file.
    exported = tmp_path / "run.json"
    shown = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "temporal"), "workflow", "show", "--workflow-id",
        f"{prefix}-0", "--output", "json", "--address", target, "--namespace", namespace,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await shown.communicate()
    assert shown.returncode == 0
    exported.write_bytes(out)
    from_file = await towline("replay", "--agent", "replay_agents:incompatible", str(exported),
                              "--json", env=env)
    assert from_file.code == 1
    [outcome] = json.loads(from_file.out)
    assert outcome["workflow_id"] == f"{prefix}-0" and outcome["nondeterministic"] is True

    # The same checks from Python, for a user's own test suite.
    outcomes = await replay_runs(client, [compatible], query=query)
    assert [o.ok for o in outcomes] == [True, True] and outcomes[0].version_changed
    await assert_replays([exported], [compatible])
    with pytest.raises(AssertionError, match="no longer replay"):
        await assert_replays([load_history(exported)], [incompatible])


async def test_towline_replay_refuses_bad_arguments(target: str, namespace: str,
                                                    tmp_path: Path) -> None:
    env = cli_env(target, namespace, extra=TESTS_ON_PATH)
    missing = await towline("replay", "--agent", "replay_agents:original",
                            str(tmp_path / "none.json"), env=env)
    assert missing.code == 2 and missing.err.startswith("towline: error: cannot read the history")
    no_agent = await towline("replay", env=env)
    assert no_agent.code == 2
