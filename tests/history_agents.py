"""The agents whose recorded histories live in `tests/histories/` — keep them stable forever.

A committed history names its agent, and replaying it runs today's `AgentRun`
code for that agent against yesterday's events. So these definitions (names,
tools, capabilities, limits, output types) must never change: a change here
would make the replay test compare the engine with a different agent. To
cover new behaviour, add a new agent (and record its history with
`python scripts/record_history.py`); never edit one below.

They live in modules by what their histories record, and this one gathers them:

- `tests/history_turns.py`: one agent's own turns (tools with a retry, hooks, middleware,
  structured output, a failed run, continue-as-new, a payload store, frontier content);
- `tests/history_people.py`: what people and subscribers do (approvals, sessions, timeouts,
  a subscriber of a streaming run);
- `tests/history_composed.py`: work beyond the model and the function tools (MCP, a
  sub-agent, an in-workflow tool, hooks' model calls, a `wrap_model_call` chain);
- `tests/history_engine3.py`: what engine 3 records (issues 21-23).

A new recording's agents go into a module of their own, registered here by appending them to
`HISTORY_AGENTS`, their hook models to `HISTORY_MODELS`, their runs to `RECORDINGS`.

The model scripts only matter when recording (replay never calls a model);
they are deterministic so that re-recording gives the same conversations.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from towline.messages import BinaryContent
from towline.models import Model
from towline.results import RunInput

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # imported as `tests.history_agents` (the README's example)
    sys.path.append(_TESTS)  # after everything else: it shadows nothing

import history_engine4_audit as audit4
import history_engine4_ledger as ledger4
import history_engine4_native as native4
import history_engine4_real_traffic as traffic4
from history_composed import (
    HOOK_MODELS,
    hook_models_agent,
    mcp_agent,
    subagent_agent,
    todo_agent,
    wrap_agent,
)
from history_engine3 import approve_each_reused_id, unmarked_agent
from history_people import (
    approval_agent,
    approve_one_reject_one_then_chat,
    follow_to_the_end,
    streaming_agent,
    timeouts_agent,
)
from history_turns import (
    PNG,
    capability_agent,
    failing_agent,
    flaky,
    frontier_agent,
    lookup,
    middleware_agent,
    storing_agent,
    structured_agent,
    ticking_agent,
    tools_agent,
    tools_script,
)

__all__ = [
    "HISTORY_AGENTS", "HISTORY_MODELS", "RECORDINGS", "Recording", "ENGINE4_RECORDINGS",
    "ENGINE5_RECORDINGS",
    "PNG", "flaky", "lookup", "tools_script",
    "tools_agent", "capability_agent", "middleware_agent", "structured_agent", "failing_agent",
    "ticking_agent", "storing_agent", "frontier_agent", "approval_agent", "streaming_agent",
    "timeouts_agent", "mcp_agent", "subagent_agent", "todo_agent", "hook_models_agent",
    "wrap_agent", "unmarked_agent",
]


HISTORY_MODELS: dict[str, Model] = {**HOOK_MODELS}
"""Models the history agents' hooks call by name (only used when recording)."""


HISTORY_AGENTS = [
    tools_agent, capability_agent, middleware_agent, structured_agent, failing_agent,
    ticking_agent,
    approval_agent,
    mcp_agent,
    streaming_agent,
    subagent_agent, todo_agent, hook_models_agent, wrap_agent, timeouts_agent, unmarked_agent,
    storing_agent,
    frontier_agent,
]
"""Every agent a committed history names."""


@dataclass(frozen=True)
class Recording:
    """One recorded run: its workflow id (the file name), its input, and what a person does."""

    workflow_id: str
    input: RunInput
    interact: Callable[[WorkflowHandle[Any, Any]], Awaitable[None]] | None = None
    stored: bool = False
    """Recorded with the payload store of `tests/histories/payloads/` (replayed with it too)."""
    start_attributes: bool = False
    """Started as `start_run` starts a run: agent, version, status and counters in the request."""
    memo: dict[str, Any] | None = None
    """The start request's memo (a fork's lineage)."""
    routed: bool = False
    """Run by a worker whose model calls matching `ROUTED_PATTERN` go to a model queue."""


RECORDINGS = [
    Recording("history-tools", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording("history-capability", RunInput(agent="history-capability", prompt="say hello")),
    Recording("history-middleware", RunInput(agent="history-middleware", prompt="answer well")),
    Recording("history-structured", RunInput(agent="history-structured", prompt="forecast")),
    Recording("history-failed", RunInput(agent="history-failed", prompt="insist")),
    Recording(
        "history-continue-as-new",
        RunInput(agent="history-continue-as-new", prompt="tick", continue_as_new_after_events=25),
    ),
    Recording(
        "history-approval", RunInput(agent="history-approval", prompt="pay", session=True),
        interact=approve_one_reject_one_then_chat,
    ),
    Recording("history-mcp", RunInput(agent="history-mcp", prompt="use the server")),
    Recording("history-streaming", RunInput(agent="history-streaming", prompt="weather"),
              interact=follow_to_the_end),
    Recording("history-subagent", RunInput(agent="history-subagent", prompt="delegate")),
    Recording("history-todo", RunInput(agent="history-todo", prompt="plan it")),
    Recording("history-hook-models", RunInput(agent="history-hook-models", prompt="use alpha")),
    Recording("history-wrap", RunInput(agent="history-wrap", prompt="answer")),
    # recorded once runs recorded their agent's version (a `towline-agent-version-*` marker)
    Recording("history-versioned", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording(
        "history-timeouts",
        RunInput(agent="history-timeouts", prompt="pay", session=True,
                 session_timeout=timedelta(seconds=2)),
    ),
    # Recorded by the code of issue 10: model requests by key, facts carried across
    # continue-as-new (the `towline-carried-facts` patch), payloads in a store.
    Recording(
        "history-carried",
        RunInput(agent="history-continue-as-new", prompt="tick", continue_as_new_after_events=25),
    ),
    Recording(
        "history-stored",
        RunInput(agent="history-stored", prompt="read", continue_as_new_after_events=20),
        stored=True,
    ),
    # Recorded once a run decides its agent version before the search-attributes local
    # activity (the `towline-version-first` patch); the second names no known agent.
    Recording("history-version-first", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording("history-version-first-unknown", RunInput(agent="no-such-agent", prompt="hello")),
    # Recorded by the code of issue 19: thinking parts, an image in the prompt and one a tool
    # returned, an agent with native structured output.
    Recording(
        "history-frontier",
        RunInput(agent="history-frontier",
                 prompt=["What do these show?", BinaryContent(data=PNG, media_type="image/png")]),
    ),
    # Recorded by the code of issue 21: the engine-version cascade (`towline-engine-2`, one
    # engine marker and the agent version's), search attributes from the start request and
    # upserted sparsely; a session that waits (status changes) and one that names no agent.
    Recording(
        "history-engine",
        RunInput(agent="history-tools", prompt="weather and maths", session=True,
                 session_timeout=timedelta(seconds=2)),
        start_attributes=True,
    ),
    Recording("history-engine-unknown", RunInput(agent="no-such-agent", prompt="hello"),
              start_attributes=True),
    # Recorded by the code of issues 21-23 (`towline-engine-3`, `tests/history_engine3.py`).
    Recording(
        "history-engine3-todo",
        RunInput(agent="history-todo", prompt="plan it", priority=2, tenant="acme",
                 continue_as_new_after_events=12),
        start_attributes=True, routed=True,
    ),
    Recording("history-engine3-fork", RunInput(agent="history-tools", prompt="weather and maths"),
              start_attributes=True,
              memo={"towline.forked_from": {"run_id": "history-tools", "step": 1}}),
    Recording("history-engine3-approval",
              RunInput(agent="history-unmarked", prompt="pay twice", priority=4, tenant="acme"),
              interact=approve_each_reused_id, start_attributes=True),
]
"""What `scripts/record_history.py` runs (every execution of each is written)."""


# --- engine 4 (issues 28-34): each topic defines its recordings in tests/history_engine4_<topic>.py;
# its tests record them live and replay them until their histories are committed (then they
# move into RECORDINGS).

ENGINE4_RECORDINGS: list[Recording] = []
"""Engine-4 recordings whose histories are not committed yet (`scripts/record_history.py`
records them too; `--only ID` for one)."""

# the ledger on activity headers (issue 29)
HISTORY_AGENTS += ledger4.LEDGER_AGENTS
HISTORY_MODELS.update(ledger4.LEDGER_MODELS)
ENGINE4_RECORDINGS += [
    Recording(f"history-ledger4-{name}", RunInput(agent=agent.name, prompt="go"),
              start_attributes=True, memo=ledger4.start_memo(agent))
    for name, agent in (("plain", ledger4.plain_agent), ("max-steps", ledger4.max_steps_agent),
                        ("parent", ledger4.parent_agent), ("hook-model", ledger4.hook_model_agent))
] + [
    Recording("history-ledger4-session",
              RunInput(agent=ledger4.session_agent.name, prompt="go", session=True),
              interact=ledger4.wait_then_send_then_end, start_attributes=True,
              memo=ledger4.start_memo(ledger4.session_agent)),
    Recording("history-ledger4-continued",
              RunInput(agent=ledger4.continued_agent.name, prompt="go",
                       continue_as_new_after_events=25),
              start_attributes=True, memo=ledger4.start_memo(ledger4.continued_agent)),
]

# filtered and malformed answers (issue 28)
HISTORY_AGENTS += traffic4.ENGINE4_REAL_TRAFFIC_AGENTS
ENGINE4_RECORDINGS += [Recording(i, inp, start_attributes=True, memo=ledger4.start_memo(agent))
                       for i, agent, inp in traffic4.ENGINE4_REAL_TRAFFIC_RUNS]

# the hostile audit (issue 28 item 3)
HISTORY_AGENTS += audit4.AUDIT_AGENTS
ENGINE4_RECORDINGS += audit4.recordings(Recording, ledger4.start_memo(audit4.AUDIT_AGENTS[0]))

# human in the loop and client tools (issues 30-32): `tests/history_engine4_hitl.py`
try:
    from history_engine4_hitl import HITL_AGENTS, HITL_RECORDINGS
except ModuleNotFoundError:
    from tests.history_engine4_hitl import HITL_AGENTS, HITL_RECORDINGS
HISTORY_AGENTS += HITL_AGENTS
ENGINE4_HITL_RECORDINGS = [Recording(*r) for r in HITL_RECORDINGS]
"""This topic's engine-4 recordings (`tests/test_history_engine4_hitl.py` records them live)."""
ENGINE4_RECORDINGS += ENGINE4_HITL_RECORDINGS

# native tools (issue 33): a paused turn continued within its step, a background call polled
HISTORY_AGENTS += native4.NATIVE_AGENTS
ENGINE4_RECORDINGS += [
    Recording("history-native4-paused", RunInput(agent=native4.paused_agent.name, prompt="double 21")),
    Recording("history-native4-background",
              RunInput(agent=native4.background_agent.name, prompt="research it")),
]

# guardrails and handoffs (issue 32 parts 1-2)
try:
    from history_engine4_port import PORT_AGENTS, PORT_RECORDINGS
except ModuleNotFoundError:
    from tests.history_engine4_port import PORT_AGENTS, PORT_RECORDINGS
HISTORY_AGENTS += PORT_AGENTS
ENGINE4_RECORDINGS += [Recording(workflow_id, inp) for workflow_id, inp in PORT_RECORDINGS]

# Engine 5 (issue 40): the same people and agents again, on the engine that reads guard verdicts
# strictly and meters guard requests, bounds the audit trail and refuses no-op policy changes,
# checks client tool names at the start and at each handoff, and counts queued messages.
ENGINE5_RECORDINGS: list[Recording] = [
    Recording("history-engine5-tools", RunInput(agent="history-tools", prompt="weather and maths")),
    *(Recording(workflow_id.replace("engine4", "engine5"), inp)
      for workflow_id, inp in PORT_RECORDINGS),
    *(Recording(workflow_id.replace("engine4", "engine5"), inp, interact)
      for workflow_id, inp, interact in HITL_RECORDINGS),
]
"""The engine-5 recordings, committed beside the older ones (`scripts/record_history.py`)."""
