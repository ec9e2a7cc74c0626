"""Helpers for testing agents against a real Temporal server, and replaying their histories.

`assert_replays(histories, agents)` is the check to keep in a suite: it replays
recorded histories (files exported with `temporal workflow show --output json`,
or `WorkflowHistory` values) against today's agents and fails naming every run
the code no longer replays. `replay_runs` does the same for runs on a server.
`rerun(history, agent)` runs today's agent against a recorded run's responses and
reports where it departs from it (`RerunReport`, `towline.testing.rerun`).

`run_before_model_request(caps, value)` and its siblings apply capabilities' hooks to a plain
value for unit tests, in a run's order and enforcing nothing (the `arun_*` twins for hooks
that need a running event loop). They are pure code of the capability side
(`towline.capabilities.compose`, where the design contract also names them), exported here
as the testing helpers they are.
"""

from __future__ import annotations

from towline.capabilities.compose import (
    arun_after_model_request,
    arun_after_tool_execute,
    arun_before_model_request,
    arun_before_tool_execute,
    arun_before_tool_return,
    run_after_model_request,
    run_after_tool_execute,
    run_before_model_request,
    run_before_tool_execute,
    run_before_tool_return,
)
from towline.testing.harness import (
    ReplayOutcome,
    assert_replays,
    execution_histories,
    history_events,
    load_history,
    replay_histories,
    replay_runs,
    run_to_end,
    towline_worker,
)
from towline.testing.rerun import RerunReport, rerun

__all__ = [
    "towline_worker", "history_events", "execution_histories", "run_to_end", "assert_replays",
    "replay_histories", "replay_runs", "load_history", "ReplayOutcome", "rerun", "RerunReport",
    "run_before_model_request", "run_after_model_request", "run_before_tool_execute",
    "run_before_tool_return", "run_after_tool_execute", "arun_before_model_request",
    "arun_after_model_request", "arun_before_tool_execute", "arun_before_tool_return",
    "arun_after_tool_execute",
]
