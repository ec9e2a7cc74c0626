"""The engine cut (issue 41): 1.0 is one engine, and the cascade is ready for the first change after it.

A 1.0 run records no engine marker (only its agent version's); the committed 1.0 histories read
as `BASE`. Adding the first post-1.0 id to `ENGINES` makes a new run record it (and `at_least`
of its number true), while the 1.0 histories still replay as `BASE` runs.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_helpers import patch_ids
from history_agents import HISTORY_AGENTS
from temporalio.client import Client
from temporalio.worker import Replayer

from towline import Agent
from towline.client import run
from towline.runtime.fingerprint import agent_version
from towline.runtime.plugin import TowlinePlugin
from towline.testing import load_history, towline_worker
from towline.workflows import AgentRun, versions
from towline.workflows.versions import BASE, history_engine, version_patch

HISTORY = Path(__file__).parent / "histories" / "history-tools.json"
NEXT = "towline-1.1"
"""The id the first change after 1.0 would add."""

agent = Agent(name="i41-engine-cut", model="test")


async def _one_run(client: Client) -> list[str]:
    async with towline_worker(client, [agent]) as (tclient, queue):
        wid = f"i41-engine-cut-{uuid.uuid4().hex[:8]}"
        await run(tclient, agent, "hi", task_queue=queue, id=wid)
    return patch_ids((await client.get_workflow_handle(wid).fetch_history()).events)


async def test_a_1_0_run_records_no_engine_marker(client: Client) -> None:
    ids = await _one_run(client)
    assert ids == [version_patch(agent_version(agent))]
    assert versions.ENGINES == () and history_engine(load_history(HISTORY).events) == BASE


async def test_the_first_version_after_1_0_is_recorded_and_1_0_histories_still_replay(
    client: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(versions, "ENGINES", (NEXT,))
    ids = await _one_run(client)
    assert ids == [NEXT, version_patch(agent_version(agent))]  # the engine marker comes first
    assert versions.recorded_engine(ids) == BASE + 1
    history = load_history(HISTORY)
    assert history_engine(history.events) == BASE  # no marker: a 1.0 run
    replayed = await Replayer(workflows=[AgentRun], plugins=[TowlinePlugin(agents=HISTORY_AGENTS)]) \
        .replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
