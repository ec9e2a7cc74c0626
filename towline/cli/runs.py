"""`towline runs` and `towline pending`: what is running, waiting, failed or stuck, across runs.

    towline runs --status waiting --agent careful-calculator
    towline runs --version 3f9c2a1b7e40
    towline runs --stuck
    towline pending

The rows come from the visibility store (`towline.cli.listing`), which lags a live
run by a moment; the tables are rendered here (`towline.cli.render`).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from towline.cli.args import Subcommands, add_connection, add_json, command, positive
from towline.cli.common import connected
from towline.cli.listing import (
    STATUSES,
    PendingScan,
    RunRow,
    StuckRun,
    list_runs,
    pending_approvals,
    runs_query,
    stuck_runs,
)
from towline.cli.render import arguments, duration, inline, money, print_out, short, table, when
from towline.results import RunStatus

__all__ = ["runs_lines", "stuck_lines", "pending_lines", "runs_command", "pending_command", "register"]


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def runs_lines(rows: list[RunRow], now: datetime) -> list[str]:
    """The `towline runs` table."""
    headers = ("WORKFLOW ID", "AGENT", "STATUS", "STEP", "TOOL CALLS", "TOKENS", "COST",
               "STARTED", "DURATION", "VERSION")
    return table(headers, [
        (r.workflow_id, r.agent or "-", r.shown_status, _num(r.run_step), _num(r.tool_calls),
         _num(r.total_tokens), money(r.cost_micros), when(r.started), duration(r.duration(now)),
         r.agent_version or "-")
        for r in rows
    ])


def stuck_lines(stuck: list[StuckRun], now: datetime) -> list[str]:
    """The `towline runs --stuck` table, then each run's failure in full."""
    headers = ("WORKFLOW ID", "AGENT", "VERSION", "STATUS", "ATTEMPT", "FAILING FOR",
               "LAST FAILURE")
    lines = table(headers, [
        (s.row.workflow_id, s.row.agent or "-", s.row.agent_version or "-", s.row.status,
         str(s.failure.attempt or "-"),
         duration(now - s.failure.since) if s.failure.since else "-",
         short(f"{s.failure.cause}: {s.failure.message}", 70))
        for s in stuck
    ])
    lines.append("")
    lines.append("A workflow task that keeps failing is a bug in workflow code (a hook that blocks "
                 "or does I/O, a deploy that changed what old runs replay); fix and redeploy the "
                 "worker and the run goes on (a run that waits on nothing, once reset), or end it: "
                 "temporal workflow terminate --workflow-id ID --reason ...")
    if any(s.failure.cause == NONDETERMINISTIC for s in stuck):
        lines.append("")
        lines.append(NONDETERMINISM_HINT)
    return lines


NONDETERMINISTIC = "NON_DETERMINISTIC_ERROR"
"""Temporal's cause of a workflow task whose replay took another path than the history."""

NONDETERMINISM_HINT = (
    "NON_DETERMINISTIC_ERROR: a worker replaying the run took another path than its history "
    "records. Either the workflow code changed since the run started (deploy the code that "
    "recorded it, pinned with Worker Versioning), or hook code depends on something outside "
    "the run: module-level state (a global a worker's earlier runs changed, shared by every run "
    "on that worker), a cache, the clock or the environment. Keep per-run state in the run "
    "(state_schema keys), then redeploy; `towline replay --agent MODULE:ATTR --query "
    "\"WorkflowId='ID'\"` replays it against the code you have.")
"""What `towline runs --stuck` says of a run that fails on nondeterminism, and what to do."""


def pending_lines(scan: PendingScan, now: datetime) -> list[str]:
    """The `towline pending` table (longest-waiting first), with a METADATA column when a call
    carries metadata (an approval rule's `Ask(metadata=...)`, a client tool's `metadata`):
    compact JSON, cut, its control characters escaped (someone else wrote it)."""
    shown = any(p.metadata for p in scan.calls)
    headers = ("WORKFLOW ID", "#", "CALL ID", "TOOL", "ARGUMENTS", "FOR", "WAITING", "DIGEST")
    lines = table(headers + (("METADATA",) if shown else ()), [
        (p.workflow_id, "-" if p.index is None else str(p.index), p.call_id, p.tool_name,
         arguments(p.args, 60), "result" if p.kind == "client" else "approval",
         duration(p.waited(now)), p.digest or "-")
        + ((inline(short(p.metadata, 60)) if p.metadata else "-",) if shown else ())
        for p in scan.calls
    ])
    for workflow_id, r in scan.remembered:
        pattern = f" where {json.dumps(r['pattern'])}" if r.get("pattern") else ""
        lines.append(f"{workflow_id}: remembered for the {r.get('scope')}: {r.get('kind')} "
                     f"{r.get('tool')}{pattern}" + (f" (by {r['by']})" if r.get("by") else ""))
    return lines


_DECIDE_WITH = ("Decide with: towline approve WORKFLOW_ID [#|CALL_ID] (or reject, edit --args JSON, "
                "respond --result JSON or, for a client's call, --error/--retry TEXT; --all for "
                "every call of a run)")


async def runs_command(args: Any) -> int:
    """`towline runs`."""
    client, _ = await connected(args)
    now = datetime.now(UTC)
    if args.stuck:
        query = runs_query(agent=args.agent, status=args.status, query=args.query, live=True,
                           version=args.version, schedule=args.schedule)
        stuck = await stuck_runs(client, query, args.limit)
        print_out(args.json, [s.to_json(now) for s in stuck], lambda: stuck_lines(stuck, now),
                  "No stuck runs: no live run's workflow task is failing.")
        return 0
    rows = await list_runs(client, runs_query(agent=args.agent, status=args.status,
                                              query=args.query, version=args.version,
                                              schedule=args.schedule), args.limit)
    print_out(args.json, [r.to_json(now) for r in rows], lambda: runs_lines(rows, now),
              "No runs match.")
    return 0


async def pending_command(args: Any) -> int:
    """`towline pending`."""
    client, _ = await connected(args)
    now = datetime.now(UTC)
    query = runs_query(agent=args.agent, status=RunStatus.WAITING, query=args.query)
    scan = await pending_approvals(client, query, args.limit)
    for workflow_id, why in scan.unanswered:
        print(f"note: no answer from run {workflow_id!r}: {why}", file=sys.stderr)
    print_out(args.json, [p.to_json(now) for p in scan.calls]
              + [{"workflow_id": w, "remembered": r} for w, r in scan.remembered],
              lambda: [*pending_lines(scan, now), "", _DECIDE_WITH],
              "No tool calls are waiting for approval.")
    return 0


def _filters(p: argparse.ArgumentParser, limit: int) -> None:
    p.add_argument("--agent", metavar="NAME", help="only runs of this agent (TowlineAgent)")
    p.add_argument("--query", metavar="Q",
                   help="also a Temporal list filter, e.g. 'StartTime > \"2025-01-01T00:00:00Z\"'")
    p.add_argument("--limit", type=positive, default=limit, metavar="N",
                   help=f"at most N rows (default: {limit})")
    add_json(p, "print the rows as a JSON list")
    add_connection(p)


def register(sub: Subcommands) -> None:
    """`towline runs` and `towline pending`."""
    p = command(
        sub, "runs", runs_command, connection=False,
        help="list runs: status, step, tool calls, tokens, cost, duration",
        description="List runs from Temporal's visibility store, live ones first, newest first "
        "(the store lags a live run by a moment). --stuck lists live runs whose workflow task "
        "keeps failing, with the failure.")
    p.add_argument("--status", choices=STATUSES, help="only runs with this status")
    p.add_argument("--stuck", action="store_true",
                   help="only live runs whose workflow task keeps failing (describes each live run)")
    p.add_argument("--version", metavar="V",
                   help="only runs started with this agent version (TowlineAgentVersion, as "
                   "`towline runs` shows it)")
    p.add_argument("--schedule", metavar="NAME",
                   help="only the runs schedule NAME started (towline schedule list)")
    _filters(p, 50)

    p = command(
        sub, "pending", pending_command, connection=False,
        help="list tool calls waiting for approval, across runs",
        description="List the tool calls waiting for `towline approve`/`reject` in every waiting "
        "run (asks each run's worker through the `state` query), longest-waiting first.")
    _filters(p, 100)
