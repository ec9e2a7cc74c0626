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
- `tests/history_routed.py`: a routed stateful run, a fork, a reused approved call id;
- `tests/history_ledger.py`, `history_real_traffic.py`, `history_audit.py`, `history_hitl.py`,
  `history_native.py`, `history_port.py`: the ledger's headers, filtered and malformed answers,
  the hostile audit, human in the loop and client tools, native tools, guardrails and handoffs.

`RECORDINGS` is the 1.0 baseline (recorded once, by `scripts/record_history.py`). A new
recording's agents go into a module of their own, registered here by appending them to
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

import history_audit as audit
import history_ledger as ledger
import history_native as native
import history_real_traffic as traffic
from history_composed import (
    HOOK_MODELS,
    hook_models_agent,
    mcp_agent,
    subagent_agent,
    todo_agent,
    wrap_agent,
)
from history_hitl import HITL_AGENTS, HITL_RECORDINGS
from history_people import (
    approval_agent,
    approve_one_reject_one_then_chat,
    follow_to_the_end,
    streaming_agent,
    timeouts_agent,
)
from history_port import PORT_AGENTS, PORT_RECORDINGS
from history_routed import approve_each_reused_id, unmarked_agent
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
    "HISTORY_AGENTS", "HISTORY_MODELS", "RECORDINGS", "Recording",
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


# The agents of the topics recorded beside these (each module defines its agents and runs).
HISTORY_AGENTS += [*ledger.LEDGER_AGENTS, *traffic.REAL_TRAFFIC_AGENTS, *audit.AUDIT_AGENTS,
                   *HITL_AGENTS, *native.NATIVE_AGENTS, *PORT_AGENTS]
HISTORY_MODELS.update(ledger.LEDGER_MODELS)


RECORDINGS = [
    # one agent's own turns
    Recording("history-tools", RunInput(agent="history-tools", prompt="weather and maths")),
    Recording("history-capability", RunInput(agent="history-capability", prompt="say hello")),
    Recording("history-middleware", RunInput(agent="history-middleware", prompt="answer well")),
    Recording("history-structured", RunInput(agent="history-structured", prompt="forecast")),
    Recording("history-failed", RunInput(agent="history-failed", prompt="insist")),
    # facts carried across continue-as-new (no second local activity)
    Recording(
        "history-continue-as-new",
        RunInput(agent="history-continue-as-new", prompt="tick", continue_as_new_after_events=25),
    ),
    Recording(
        "history-stored",
        RunInput(agent="history-stored", prompt="read", continue_as_new_after_events=20),
        stored=True,
    ),
    # thinking parts, an image in the prompt and one a tool returned, native structured output
    Recording(
        "history-frontier",
        RunInput(agent="history-frontier",
                 prompt=["What do these show?", BinaryContent(data=PNG, media_type="image/png")]),
    ),
    # what people and subscribers do
    Recording(
        "history-approval", RunInput(agent="history-approval", prompt="pay", session=True),
        interact=approve_one_reject_one_then_chat,
    ),
    Recording("history-streaming", RunInput(agent="history-streaming", prompt="weather"),
              interact=follow_to_the_end),
    Recording(
        "history-timeouts",
        RunInput(agent="history-timeouts", prompt="pay", session=True,
                 session_timeout=timedelta(seconds=2)),
    ),
    # beyond the model and the function tools
    Recording("history-mcp", RunInput(agent="history-mcp", prompt="use the server")),
    Recording("history-subagent", RunInput(agent="history-subagent", prompt="delegate")),
    Recording("history-todo", RunInput(agent="history-todo", prompt="plan it")),
    Recording("history-hook-models", RunInput(agent="history-hook-models", prompt="use alpha")),
    Recording("history-wrap", RunInput(agent="history-wrap", prompt="answer")),
    # started as `start_run` starts a run (search attributes in the request, upserted sparsely):
    # a session that waits (status changes), and a run that names no agent
    Recording(
        "history-session",
        RunInput(agent="history-tools", prompt="weather and maths", session=True,
                 session_timeout=timedelta(seconds=2)),
        start_attributes=True,
    ),
    Recording("history-unknown-agent", RunInput(agent="no-such-agent", prompt="hello"),
              start_attributes=True),
    # a stateful run on a routed model queue with a priority and a tenant, state and routes
    # carried across continue-as-new; a fork's lineage; a reused approved call id
    # (`tests/history_routed.py`)
    Recording(
        "history-routed-todo",
        RunInput(agent="history-todo", prompt="plan it", priority=2, tenant="acme",
                 continue_as_new_after_events=12),
        start_attributes=True, routed=True,
    ),
    Recording("history-fork", RunInput(agent="history-tools", prompt="weather and maths"),
              start_attributes=True,
              memo={"towline.forked_from": {"run_id": "history-tools", "step": 1}}),
    Recording("history-reused-id",
              RunInput(agent="history-unmarked", prompt="pay twice", priority=4, tenant="acme"),
              interact=approve_each_reused_id, start_attributes=True),
    # the ledger on activity headers, whatever hooks write (`tests/history_ledger.py`)
    *(Recording(f"history-ledger-{name}", RunInput(agent=agent.name, prompt="go"),
                start_attributes=True, memo=ledger.start_memo(agent))
      for name, agent in (("plain", ledger.plain_agent), ("max-steps", ledger.max_steps_agent),
                          ("parent", ledger.parent_agent),
                          ("hook-model", ledger.hook_model_agent))),
    Recording("history-ledger-session",
              RunInput(agent=ledger.session_agent.name, prompt="go", session=True),
              interact=ledger.wait_then_send_then_end, start_attributes=True,
              memo=ledger.start_memo(ledger.session_agent)),
    Recording("history-ledger-continued",
              RunInput(agent=ledger.continued_agent.name, prompt="go",
                       continue_as_new_after_events=25),
              start_attributes=True, memo=ledger.start_memo(ledger.continued_agent)),
    # filtered and malformed answers (`tests/history_real_traffic.py`)
    *(Recording(i, inp, start_attributes=True, memo=ledger.start_memo(agent))
      for i, agent, inp in traffic.REAL_TRAFFIC_RUNS),
    # the hostile audit: too many calls, too large a state, a cost no ledger records
    *audit.recordings(Recording, ledger.start_memo(audit.AUDIT_AGENTS[0])),
    # human in the loop and client tools (`tests/history_hitl.py`)
    *(Recording(*r) for r in HITL_RECORDINGS),
    # native tools: a paused turn continued within its step, a background call polled
    Recording("history-native-paused",
              RunInput(agent=native.paused_agent.name, prompt="double 21")),
    Recording("history-native-background",
              RunInput(agent=native.background_agent.name, prompt="research it")),
    # guardrails and handoffs (`tests/history_port.py`)
    *(Recording(workflow_id, inp) for workflow_id, inp in PORT_RECORDINGS),
]
"""The 1.0 recordings: what `scripts/record_history.py` runs (every execution of each is
written to `tests/histories/`)."""
