"""Replay compares every model request with the recorded one, not only Temporal's commands.

Model calls, the run's own and its hooks', are one activity type: a reorder of
model-calling capabilities emits the same commands. `towline replay` still catches it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from history_agents import HISTORY_AGENTS, HISTORY_MODELS, hook_models_agent
from temporalio.client import Client
from temporalio.worker import Replayer

from towline import Agent
from towline.capabilities import Summarization
from towline.client import start_run
from towline.replay import ReplayOutcome, replay_histories
from towline.replay.requests import RequestJournal, recorded_requests
from towline.runtime.plugin import TowlinePlugin
from towline.testing import load_history, towline_worker
from towline.workflows import AgentRun

HISTORIES = Path(__file__).parent / "histories"
STORE = f"file://{HISTORIES / 'payloads'}"


def _with_summarizer(**changes: object) -> Agent:
    caps = list(hook_models_agent.capabilities)
    assert isinstance(caps[0], Summarization)
    return replace(hook_models_agent, capabilities=[replace(caps[0], **changes), *caps[1:]])


async def test_a_hook_calling_another_model_is_a_nondeterminism() -> None:
    """Temporal sees the same commands (one activity type for every model call)."""
    [outcome] = await replay_histories([load_history(HISTORIES / "history-hook-models.json")],
                                       [_with_summarizer(model="history-reviewer")])
    assert not outcome.ok and outcome.nondeterministic
    assert outcome.failure is not None
    # the first request that differs, its step, and both sides (which model, who asked)
    assert "model request 5 (step 3) differs" in outcome.failure
    assert ("recorded history-summarizer asked by 'history-summarizer · summarise 3 messages "
            "· step 3'") in outcome.failure
    assert ("replayed history-reviewer asked by 'history-reviewer · summarise 3 messages "
            "· step 3'") in outcome.failure
    assert outcome.line().startswith("FAILED") and "nondeterminism" in outcome.line()


async def test_a_hook_sending_other_input_is_a_nondeterminism(client: Client) -> None:
    """Same model, same hook, same step: only the request's input tells them apart."""
    agent = replace(hook_models_agent, name="history-summarizing",
                    capabilities=[Summarization(model="history-summarizer", trigger_messages=3,
                                                keep=2)])
    reworded = replace(agent, capabilities=[Summarization(
        model="history-summarizer", trigger_messages=3, keep=2, prompt="Summarise in French.")])
    outcome = await _record_and_replay(client, agent, reworded)
    assert outcome.nondeterministic and outcome.failure is not None
    assert "(step 3) differs" in outcome.failure
    recorded, replayed = outcome.failure.split("; replayed ")
    assert "asked by 'history-summarizer · summarise 3 messages · step 3'" in recorded
    assert "asked by 'history-summarizer · summarise 3 messages · step 3'" in replayed
    assert recorded.split(", input ")[1] != replayed.split(", input ")[1]


async def test_a_reorder_of_model_calls_in_one_phase_is_a_nondeterminism(client: Client) -> None:
    """Two summarisers of one phase (before_model), swapped: each would read the other's
    recorded answer. (The issue's swap, Summarization and ToolSelector, is no reorder: the
    summariser runs in `before_model`, the selector around the call (`wrap_model_call`),
    whatever their order in the list, so every request stays as recorded.)"""
    summarizer, selector, gate = hook_models_agent.capabilities
    [same] = await replay_histories(
        [load_history(HISTORIES / "history-hook-models.json")],
        [replace(hook_models_agent, capabilities=[selector, summarizer, gate])])
    assert same.ok, same.failure
    first = Summarization(model="history-summarizer", trigger_messages=3, keep=2)
    second = Summarization(model="history-reviewer", trigger_messages=3, keep=2,
                           prompt="Summarise again.")
    ordered = replace(hook_models_agent, name="history-two-summarizers",
                      capabilities=[first, second])
    swapped = replace(ordered, capabilities=[second, first])
    assert (await _record_and_replay(client, ordered, ordered)).ok
    outcome = await _record_and_replay(client, ordered, swapped)
    assert outcome.nondeterministic and outcome.failure is not None
    assert "recorded history-summarizer" in outcome.failure
    assert "replayed history-reviewer" in outcome.failure


async def test_every_committed_history_agrees_request_by_request() -> None:
    histories = [load_history(p) for p in sorted(HISTORIES.glob("*.json"))]
    outcomes = await replay_histories(histories, HISTORY_AGENTS, payload_store=STORE)
    assert [o.failure for o in outcomes if not o.ok] == []
    assert len(outcomes) == len(histories)


@pytest.mark.parametrize("name", ["history-hook-models.json", "history-frontier.json"])
async def test_the_journal_sees_every_recorded_request(name: str) -> None:
    """What the comparison above stands on: replay notes each model request the history
    holds, in order, the same (a journal that noted nothing would agree with anything)."""
    journal = RequestJournal()
    replayer = Replayer(workflows=[AgentRun], interceptors=[journal], plugins=[
        TowlinePlugin(HISTORY_AGENTS, payload_store=STORE)])
    history = load_history(HISTORIES / name)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None
    converter = replayer.config(active_config=True).get("data_converter")
    assert converter is not None
    recorded = await recorded_requests(history.events, converter)
    replayed = journal.take(history.workflow_id)
    assert len(recorded) >= 2 and len(replayed) == len(recorded)
    assert [(r.model, r.summary) for r in replayed] == [(r.model, r.summary) for r in recorded]
    if all(r.protocol == "chain" for r in recorded):  # same protocol: the digests agree too
        assert [r.digest for r in replayed] == [r.digest for r in recorded]


async def _record_and_replay(client: Client, recorded: Agent, replayed: Agent) -> ReplayOutcome:
    """Run `recorded` on the dev server, then replay its history with `replayed`."""
    async with towline_worker(client, [recorded], models=HISTORY_MODELS) as (tclient, queue):
        handle = await start_run(tclient, recorded, "use alpha", task_queue=queue)
        await handle.result()
        history = await handle.fetch_history()
    [outcome] = await replay_histories([history], [replayed])
    return outcome
