"""Replay compares every model request with the recorded one, not only Temporal's commands.

Model calls, the run's own and its hooks', are one activity type: a reorder of
model-calling capabilities emits the same commands. `towline replay` still catches it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from history_agents import HISTORY_AGENTS, HISTORY_MODELS, hook_models_agent
from temporalio.client import Client, WorkflowHistory

from towline import Agent
from towline.capabilities import Summarization
from towline.client import start_run
from towline.replay import ReplayOutcome, replay_histories
from towline.testing import towline_worker

HISTORIES = Path(__file__).parent / "histories"
STORE = f"file://{HISTORIES / 'payloads'}"


def _load(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(name.split(".")[0], (HISTORIES / name).read_text())


def _with_summarizer(**changes: object) -> Agent:
    caps = list(hook_models_agent.capabilities)
    assert isinstance(caps[0], Summarization)
    return replace(hook_models_agent, capabilities=[replace(caps[0], **changes), *caps[1:]])


async def test_a_hook_calling_another_model_is_a_nondeterminism() -> None:
    """Temporal sees the same commands (one activity type for every model call)."""
    [outcome] = await replay_histories([_load("history-hook-models.json")],
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
    recorded answer."""
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
    histories = [_load(p.name) for p in sorted(HISTORIES.glob("*.json"))]
    outcomes = await replay_histories(histories, HISTORY_AGENTS, payload_store=STORE)
    assert [o.failure for o in outcomes if not o.ok] == []
    assert len(outcomes) == len(histories)



async def _record_and_replay(client: Client, recorded: Agent, replayed: Agent) -> ReplayOutcome:
    """Run `recorded` on the dev server, then replay its history with `replayed`."""
    async with towline_worker(client, [recorded], models=HISTORY_MODELS) as (tclient, queue):
        handle = await start_run(tclient, recorded, "use alpha", task_queue=queue)
        await handle.result()
        history = await handle.fetch_history()
    [outcome] = await replay_histories([history], [replayed])
    return outcome
