"""`towline replay`: replay recorded runs against the local code before deploying it.

    towline replay --agent examples.calculator:agents
    towline replay --agent myapp.agents:support --query 'StartTime > "2025-06-01T00:00:00Z"'
    towline replay --agent myapp.agents:support history.json

Histories come from the server (the runs of the given agents, every execution,
newest first) or from JSON files (`temporal workflow show --output json`). One
line per execution; exit 0 when every one replays, 1 when any does not.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from temporalio.runtime import Runtime, TelemetryConfig

from towline.cli.args import Subcommands, add_json, command, positive
from towline.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    connect_client,
    load_agents,
    one_line,
    target_of,
)
from towline.cli.render import print_out
from towline.replay import ReplayOutcome, load_history, replay_histories, replay_runs

__all__ = ["replay_command", "register"]


def _histories(files: list[str]) -> list[Any]:
    found: list[Any] = []
    for name in files:
        path = Path(name)
        try:
            found.append(load_history(path))
        except Exception as e:  # noqa: BLE001 - unreadable, not JSON, not a history
            raise CliError(f"cannot read the history {name}: {one_line(e)}", EXIT_USAGE) from None
    return found


async def replay_command(args: Any) -> int:
    """`towline replay`."""
    agents = load_agents(args.agent)
    target = target_of(args)
    # Each failure is one line here: the SDK's own logs of it (tracebacks) stay quiet.
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    quiet = Runtime(telemetry=TelemetryConfig(logging=None))
    outcomes: list[ReplayOutcome]
    if args.files:
        outcomes = await replay_histories(_histories(args.files), agents,
                                          encryption=target.encryption, runtime=quiet)
    else:
        client = await connect_client(target)
        outcomes = await replay_runs(client, agents, query=args.query, limit=args.limit,
                                     encryption=target.encryption, runtime=quiet)
    failed = [o for o in outcomes if not o.ok]
    print_out(args.json, [o.to_json() for o in outcomes], lambda: [
        *(o.line() for o in outcomes),
        f"{len(outcomes)} replayed: {len(outcomes) - len(failed)} ok, {len(failed)} failed"
        + (" (deploying this code would leave those runs stuck)" if failed else "")],
        "No runs to replay.")
    return EXIT_FAILURE if failed else 0


def register(sub: Subcommands) -> None:
    """`towline replay`."""
    p = command(
        sub, "replay", replay_command,
        help="replay recorded runs against the local code (before a deploy)",
        description="Replay the histories of runs (from the server, or JSON files exported with "
        "`temporal workflow show --output json`) against the local definitions of the agents: "
        "one line per workflow execution, exit 1 if any no longer replays (the new code would "
        "emit other commands: guard the change with workflow.patched).")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="history JSON files (default: fetch the agents' runs from the server)")
    p.add_argument("--agent", action="append", required=True, metavar="MODULE:ATTR",
                   help="the local agent (or list of agents) to replay with; repeatable")
    p.add_argument("--query", metavar="Q",
                   help="also a Temporal list filter, e.g. 'ExecutionStatus = \"Running\"'")
    p.add_argument("--limit", type=positive, default=100, metavar="N",
                   help="at most N workflow executions, newest first (default: 100)")
    add_json(p, "print the outcomes as a JSON list")
