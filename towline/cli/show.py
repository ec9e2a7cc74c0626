"""`towline show`: inspect a run by workflow id.

What is shown is read by `towline.cli.runstate.read_run` (queries while the run is
live, its result or failure afterwards, the ledger memo and search attributes as
fallbacks; the conversation from the history when none of them has it,
`towline.replay.run_history`), with the confirmed counters and the billable Actions read from the history of
every execution (`towline.cli.ledger_view`, `towline.telemetry.actions`); while the run is
live it says how far behind them its memo is. This module renders it, as text or as JSON
(`--json`: `counters` the confirmed ones, `memo_counters` the memo's).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from towline.cli.args import Subcommands, add_json, add_ui_url, command
from towline.cli.attempts import FailedAttempt, run_attempts
from towline.cli.common import connected, ui_base, workflow_url
from towline.cli.ledger_view import confirmed_in, memo_line
from towline.cli.render import (
    SESSION_ENDS,
    conversation_lines,
    counters_lines,
    duration,
    format_call,
    inline,
    print_json,
    terminal_text,
    when,
)
from towline.cli.runstate import RunDetails, read_run
from towline.cli.watch import add_watch_options, watch_command
from towline.replay.records import started_input
from towline.replay.run_history import recorded_conversation
from towline.runtime.ledger import format_cost
from towline.telemetry.actions import ActionCount, billable_actions
from towline.testing import execution_histories

__all__ = ["show_lines", "show_command", "register", "decision_lines", "audit_line"]


def show_lines(details: RunDetails, now: datetime, url: str | None, *,
               thinking: bool = True, actions: ActionCount | None = None,
               attempts: Sequence[FailedAttempt] = ()) -> list[str]:
    """The text `towline show` prints (`thinking` off: without the model's thinking;
    `actions`: the run's billable Actions; `attempts`: its failed activity attempts)."""
    d = details
    version = d.counters.agent_version if d.counters is not None else None
    out = [
        f"Run       {d.workflow_id}  (run id {d.run_id})",
        f"Status    {d.execution_status}",
        (f"Agent     {d.agent or '-'}" + (f"  (version {version})" if version else "")
         + (f", now {d.handoffs[-1].to_agent}" if d.handoffs else "")),
        *([f"Handoffs  {' -> '.join([d.handoffs[0].from_agent, *(h.to_agent for h in d.handoffs)])}"
           + f"  (at step {', '.join(str(h.step) for h in d.handoffs)})"] if d.handoffs else []),
        *([f"Forked    from {d.forked_from.run_id} at step {d.forked_from.step}"]
          if d.forked_from else []),
        f"Queue     {d.task_queue}",
        *([f"Context   {json.dumps(d.context, ensure_ascii=False, sort_keys=True)}"]
          if d.context else []),
        f"Started   {when(d.started)}   Closed {when(d.closed)}",
    ]
    if d.cost_micros is not None:
        unpriced = d.counters.unpriced_requests if d.counters is not None else 0
        out.append(f"Cost      {format_cost(d.cost_micros, unpriced)}")
    if actions is not None:
        out.append(f"Actions   {actions.line()}  (queries and heartbeats not counted: "
                   "they are not in the history)")
    if url:
        out.append(f"UI        {url}")
    if d.execution_status == "RUNNING" and d.messages is not None:
        out.append(f"Run state {d.status}")
    if d.session_end is not None:
        out.append(f"Ended     {SESSION_ENDS.get(d.session_end, d.session_end)}")
    if d.failure is not None:
        out.append(f"Failure   {d.failure[0]}: {d.failure[1]}")
    if d.stuck is not None:
        s = d.stuck
        since = f", failing for {duration(now - s.since)}" if s.since else ""
        if s.attempt == 0:
            out.append(f"Stuck     {s.cause}: {s.message}")
        else:
            out.append(f"Stuck     workflow task attempt {s.attempt}{since}: {s.cause}: "
                       f"{s.message}")
            out.append("          (workflow code fails on every attempt: fix and redeploy the "
                       "worker, or terminate the run with Temporal's CLI)")
    if d.counters is not None:
        out.extend(counters_lines(d.counters, d.usage))
    memo = memo_line(d.memo, d.counters) if d.execution_status == "RUNNING" else None
    if memo is not None:
        out.append(memo)
    if d.execution_status == "RUNNING" and d.waiting_for:
        out.append(f"Waiting   for {d.waiting_for}")
    for p in d.pending:
        waited = p.waited(now)
        since = f"  waiting {duration(waited)}" if waited is not None else ""
        index = f"  #{p.index} digest {p.digest}" if p.index is not None else ""
        what = "a client's result" if p.kind == "client" else "approval"
        hint = (f"towline respond {d.workflow_id} {p.call_id} --result JSON"
                if p.kind == "client" else f"towline approve {d.workflow_id} {p.call_id}")
        out.append(f"Waiting for {what}: {format_call(p.tool_name, p.args)}  call id "
                   f"{p.call_id}{since}{index}  ({hint})")
        if p.metadata:
            out.append(f"          metadata {json.dumps(p.metadata, ensure_ascii=False)}")
    out.extend(decision_lines(d.approvals))
    if attempts:
        out.append("Failed attempts (Temporal retried them):")
        out.extend(f"  {a.entry()}" for a in attempts)
    out.extend(d.notes)
    if d.has_output:
        output = d.output
        out += ["Output:", output if isinstance(output, str)
                else json.dumps(output, indent=2, ensure_ascii=False)]
    if d.messages is not None:
        out.append("Conversation:")
        out.extend(conversation_lines(d.messages, thinking=thinking) or ["  (empty)"])
    return out


def decision_lines(approvals: dict[str, Any]) -> list[str]:
    """The audit trail and remembered decisions, as `towline show` prints them."""
    entries: list[dict[str, Any]] = approvals.get("decisions") or []
    total: int = approvals.get("decisions_total") or len(entries)
    out: list[str] = []
    if entries:
        earlier = f" (the newest {len(entries)} of {total})" if total > len(entries) else ""
        out.append(f"Decisions{earlier}:")
        out.extend("  " + audit_line(e) for e in entries)
    remembered: list[dict[str, Any]] = approvals.get("remembered") or []
    for r in remembered:
        pattern = f" where {json.dumps(r['pattern'])}" if r.get("pattern") else ""
        out.append(inline(f"Remembered for the {r.get('scope')}: {r.get('kind')} {r.get('tool')}"
                          f"{pattern}" + (f" (by {r['by']}, as the client declared)"
                                          if r.get("by") else "")))
    return out


def audit_line(e: dict[str, Any]) -> str:
    """One audit entry, on one line: when, what, which call, who (or which rule; who decided
    and the update's identity are what the client declared), why, the digest."""
    if e.get("decision") == "policy":
        what = f"policy changed: rules {json.dumps(e.get('rules') or {})}"
        if e.get("default"):
            what += f", default {e['default']}"
    else:
        what = f"{e.get('decision')} {e.get('tool')} call {e.get('call_id')} (step {e.get('step')})"
        if e.get("args") is not None:
            what += f": args {json.dumps(e.get('original_args'))} -> {json.dumps(e['args'])}"
        if "result" in e:
            what += f": result {json.dumps(e['result'], default=str)[:80]}"
    who = {"person": "by a person", "rule": "by the agent's rule", "policy": "by the run's policy",
           "default": "by the default rule", "remembered": "as remembered",
           "timeout": "on timeout", "client": "by the client"}.get(str(e.get("source")),
                                                                  str(e.get("source")))
    if e.get("by") or e.get("identity"):  # neither is verified: the client says so
        identity = [f"client identity {e['identity']}"] if e.get("identity") else []
        who += (f" {e['by']}" if e.get("by") else "") + (
            f" ({'; '.join([*identity, 'as the client declared'])})")
    tail = "".join(f"  {k} {e[k]}" for k in ("reason", "digest") if e.get(k))
    # every field on this one line, escaped: none can start a line or drive the terminal
    return inline(f"{e.get('at', '')}  {what}  {who}{tail}")


async def with_identities(client: Any, details: RunDetails, histories: list[Any]) -> None:
    """Name each person's decision by the identity its update was sent with (the history's
    UpdateAccepted event), which the run itself cannot see."""
    entries: list[dict[str, Any]] = details.approvals.get("decisions") or []
    if not any(e.get("update_id") for e in entries):
        return
    identity: dict[str, str] = {}
    for history in histories:
        for event in history.events:
            if event.HasField("workflow_execution_update_accepted_event_attributes"):
                req = event.workflow_execution_update_accepted_event_attributes.accepted_request
                identity[req.meta.update_id] = req.meta.identity
    for e in entries:
        found = identity.get(str(e.get("update_id")))
        if found:
            e["identity"] = found


async def start_context(client: Any, chain: Sequence[Any]) -> dict[str, Any] | None:
    """The run's context: the `context` of its first execution's input (None when it has
    none, or the input cannot be read here, e.g. encrypted without the key)."""
    if not chain or not chain[0].events:
        return None
    context = (await started_input(client.data_converter, chain[0].events[0])).get("context")
    return context if isinstance(context, dict) else None  # pyright: ignore[reportUnknownVariableType]


async def show_command(args: Any) -> int:
    """`towline show WORKFLOW_ID` (`--follow`: `towline watch WORKFLOW_ID`)."""
    if args.follow:  # streaming
        return await watch_command(args)
    client, target = await connected(args)
    details = await read_run(client, args.workflow_id)
    now = datetime.now(UTC)
    url = workflow_url(ui_base(target, args.ui_url), target.namespace, details.workflow_id)
    # every execution's history (continue-as-new: each start is an Action), from the first
    chain = await execution_histories(client, details.workflow_id, details.first_run_id)
    actions = billable_actions(e for history in chain for e in history.events)
    if details.messages is None:  # no worker answered, or the run ended without a result
        details.messages, note = await recorded_conversation(chain, client.data_converter)
        details.notes += [note] if note else []
    # a live run's confirmed counters: the latest the history records (a header, a status
    # change's memo), never a live query's, which may run ahead of what is confirmed; a
    # closed run's are its result's or failure's (read above, from the store if need be)
    if details.execution_status == "RUNNING" and chain:
        confirmed = await confirmed_in(client, chain[-1].events)
        details.counters = confirmed or details.counters
    await with_identities(client, details, chain)
    details.context = await start_context(client, chain)
    attempts = await run_attempts(client, details.workflow_id, chain)
    if args.json:
        print_json({**details.to_json(now), "actions": actions.to_json(), "ui_url": url,
                    "failed_attempts": [a.to_json() for a in attempts]})
    else:
        # the output and the conversation hold what models, tools and people wrote: escaped
        print(terminal_text("\n".join(show_lines(details, now, url, thinking=not args.hide_thinking,
                                                 actions=actions, attempts=attempts))))
    return 0


def register(sub: Subcommands) -> None:
    """`towline show`."""
    p = command(
        sub, "show", show_command,
        help="print a run's status, counters, cost, pending approvals and conversation",
        description="Print a run's status, ledger counters, usage, cost (when known), the tool "
        "calls waiting for approval, a failing workflow task, its billable Temporal Cloud Actions "
        "(counted from its history), and the conversation (from the "
        "queries while it runs, from its result or failure afterwards), the model's thinking "
        "included (its signature abbreviated; --json has it whole).")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    add_json(p, "print it all as one JSON object")
    p.add_argument("--follow", action="store_true",  # streaming
                   help="follow the run's live events instead, as towline watch does (with "
                   "--json: one JSON object per event)")
    add_watch_options(p)
    add_ui_url(p)
