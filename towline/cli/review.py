"""`towline approve`, `reject`, `edit`, `respond` and `policy`: decide what a live run's calls
wait for, and change its approval policy.

A call is named by its id, a unique prefix of it, its index as `towline pending` shows it
(`2` or `#2`), or not at all when exactly one call waits. Each command reads the run's
`state` query first and sends the call's digest with the decision (a call that changed since
is refused), through the `decide` update (`--all`: every call waiting for approval at once),
or `tool_result` for a client tool's result. Runs started before engine 4 get the earlier
`approve` and `reject` updates.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from towline.cli.args import Subcommands, add_json, command
from towline.cli.common import CliError, connected
from towline.cli.render import format_call, print_json
from towline.cli.runstate import QUERY_TIMEOUT, query_state
from towline.cli.steer import accepted_update, live_run, refused, require_worker, wait_option
from towline.review import CallNotFound, PendingCall, calls_in_state, decision, pick

__all__ = ["review_command", "policy_command", "register", "parse_json", "parse_rule"]

_DONE = {"approve": "approved", "reject": "rejected", "edit": "edited", "respond": "responded"}


def parse_json(text: str, what: str) -> Any:
    """`text` as JSON, or a usage error naming `what`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{what} is not JSON ({e.msg} at character {e.pos}): {text[:80]}", 2) from None


def parse_rule(text: str) -> tuple[str, Any]:
    """`TOOL=approve|deny|ask|clear|deny:MESSAGE` as a `set_policy` rule."""
    tool, sep, verdict = text.partition("=")
    if not sep or not tool:
        raise CliError(f"--rule {text!r}: expected TOOL=approve|deny|ask|clear|deny:MESSAGE", 2)
    if verdict == "clear":
        return tool, None
    if verdict.startswith("deny:"):
        return tool, {"deny": verdict.removeprefix("deny:")}
    if verdict not in ("approve", "deny", "ask"):
        raise CliError(f"--rule {text!r}: the rule is approve, deny, ask, clear or deny:MESSAGE", 2)
    return tool, verdict


async def _send(handle: WorkflowHandle[Any, Any], desc: Any, client: Any, name: str, arg: Any,
                wait: float) -> Any:
    update = await accepted_update(client, handle, desc, name, arg, wait)
    try:
        return await update.result()
    except WorkflowUpdateFailedError as e:
        raise refused(name, handle.id, e) from None


def _decisions(args: Any, kind: str, calls: list[PendingCall]) -> list[Any]:
    if args.all:
        if args.call:
            raise CliError("give a call or --all, not both", 2)
        chosen = [c for c in calls if c.kind == "approval"]
        if not chosen:
            raise CliError(f"no call of run {args.workflow_id!r} is waiting for approval")
    else:
        try:
            chosen = [pick(calls, args.call)]
        except CallNotFound as e:
            raise CliError(f"run {args.workflow_id!r}: {e}") from None
    options: dict[str, Any] = {"reason": args.reason, "remember": args.remember,
                               "pattern": parse_json(args.pattern, "--pattern") if args.pattern else None}
    if kind == "edit":
        options["args"] = parse_json(args.args, "--args")
        if not isinstance(options["args"], dict):
            raise CliError("--args must be a JSON object of the tool's arguments", 2)
    if kind == "respond":
        options["result"] = parse_json(args.result, "--result")
    return [(c, decision(c, kind, **options)) for c in chosen]


def _single(kind: str, c: PendingCall, d: Any, by: str | None) -> tuple[str, Any]:
    """The update (and its argument) for one decision on `c`."""
    from towline.workflows import (
        ApprovalDecision,
        EditDecision,
        RespondDecision,
        ToolResultInput,
    )

    common: dict[str, Any] = {"call_id": c.call_id, "digest": c.digest, "reason": d.reason,
                              "by": by, "remember": d.remember, "pattern": d.pattern}
    if c.kind == "client":
        if kind != "respond":
            raise CliError(f"call {c.call_id} waits for a client tool's result: towline respond "
                           f"RUN {c.call_id} --result JSON", 2)
        return "tool_result", ToolResultInput(call_id=c.call_id, result=d.result, digest=c.digest,
                                              by=by)
    if c.index is None and c.tool_name == "?":  # no state to read: the run checks the call
        pass
    elif c.digest is None:  # a run from before engine 4: approve and reject, as they were
        if kind not in ("approve", "reject"):
            raise CliError("this run was started by an earlier towline: it takes approve and "
                           "reject only", 2)
        return kind, ApprovalDecision(call_id=c.call_id, reason=d.reason)
    if kind == "edit":
        return kind, EditDecision(**common, args=d.args)
    if kind == "respond":
        return kind, RespondDecision(**common, result=d.result)
    return kind, ApprovalDecision(**common)


async def review_command(args: Any) -> int:
    """`towline approve|reject|edit|respond WORKFLOW_ID [CALL]`."""
    kind: str = args.command
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, kind)
    await require_worker(client, desc, kind)
    state = await query_state(handle, min(QUERY_TIMEOUT, timedelta(seconds=args.wait)))
    if isinstance(state, str):
        if not args.call or args.all:  # nothing to go on but the state
            raise CliError(f"run {args.workflow_id!r}: {state}")
        calls = [PendingCall(workflow_id=handle.id, call_id=args.call, tool_name="?", args={},
                             run_step=None, digest=None, index=None)]  # the run checks it
    else:
        calls = calls_in_state(handle.id, state)
    chosen = _decisions(args, kind, calls)
    if args.all:
        from towline.workflows import Decisions

        entries: list[Any] = await _send(handle, desc, client, "decide",
                                         Decisions(decisions=[d for _, d in chosen], by=args.by),
                                         args.wait)
    else:
        [(c, d)] = chosen
        name, arg = _single(kind, c, d, args.by)
        await _send(handle, desc, client, name, arg, args.wait)
        entries = [{"call_id": c.call_id, "tool": c.tool_name,
                    "decision": "result" if name == "tool_result" else _DONE[kind]}]
    if args.json:
        print_json(entries)
        return 0
    by_id = {c.call_id: c for c, _ in chosen}
    for e in entries:
        c = by_id[e["call_id"]]
        what = "gave the result of" if e["decision"] == "result" else e["decision"]
        tail = f" (remembered for the {args.remember})" if args.remember else ""
        shown = f": #{c.index} {format_call(c.tool_name, c.args)}" if c.index is not None else ""
        print(f"{what} tool call {c.call_id} in run {args.workflow_id}{shown}{tail}")
    return 0


async def policy_command(args: Any) -> int:
    """`towline policy WORKFLOW_ID --rule TOOL=VERDICT ... [--default VERDICT]`."""
    from towline.workflows import PolicyUpdate

    given: list[str] = args.rule or []
    rules = dict(parse_rule(r) for r in given)
    if not rules and args.default is None:
        raise CliError("give at least one --rule TOOL=VERDICT or --default VERDICT", 2)
    update = PolicyUpdate.model_validate({"rules": rules, "default": args.default, "by": args.by,
                                          "reason": args.reason})
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, "change the policy of")
    await require_worker(client, desc, "policy change")
    policy: dict[str, Any] = await _send(handle, desc, client, "set_policy", update, args.wait)
    if args.json:
        print_json(policy)
        return 0
    rules: dict[str, Any] = policy.get("rules") or {}
    shown = ", ".join(f"{k}={v if isinstance(v, str) else 'deny:' + str(v.get('deny'))}"
                      for k, v in rules.items()) or "none"
    print(f"policy of run {args.workflow_id}: rules {shown}; default "
          f"{policy.get('default') or 'the agent’s'}")
    return 0


def _common(p: argparse.ArgumentParser, remember: bool = True) -> None:
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    p.add_argument("call", metavar="CALL", nargs="?",
                   help="the call: its id, a unique prefix, its index (towline pending shows "
                   "it), or nothing when one call waits")
    p.add_argument("--reason", help="recorded with the decision (told to the model on reject)")
    p.add_argument("--by", metavar="NAME", help="who decides, recorded in the audit trail")
    if remember:
        p.add_argument("--remember", choices=("run", "session"),
                       help="decide later calls of this tool the same way, without asking, for "
                       "the rest of the run (this turn) or the session")
        p.add_argument("--pattern", metavar="JSON",
                       help='with --remember: only calls whose arguments match, e.g. '
                       '\'{"to": "*@example.com"}\'')
    add_json(p, "print the decisions' audit entries")
    wait_option(p)


def register(sub: Subcommands) -> None:
    """`towline approve`, `reject`, `edit`, `respond` and `policy`."""
    for name, what in (("approve", "approve a tool call waiting for approval"),
                       ("reject", "reject a tool call waiting for approval (the model is told why)")):
        p = command(sub, name, review_command, help=what,
                    description=f"{what[0].upper()}{what[1:]}: the run's `{name}` update (`decide` "
                    "with --all), naming the call's digest.")
        p.add_argument("--all", action="store_true", help="every call waiting for approval, at once")
        _common(p)
    p = command(sub, "edit", review_command, all=False,
                help="approve a waiting tool call with other arguments",
                description="Approve a waiting call with other arguments (checked against the "
                "tool's schema; the original and the edit are both recorded).")
    p.add_argument("--args", required=True, metavar="JSON", help="the arguments the call runs with")
    _common(p)
    p = command(sub, "respond", review_command, all=False,
                help="give a waiting call its return (a reviewer's answer, or a client tool's result)",
                description="Give a waiting call its return: for a call waiting for approval, the "
                "tool does not run and the model sees RESULT; for a client tool's call, RESULT is "
                "the tool's result.")
    p.add_argument("--result", required=True, metavar="JSON", help="the return, as JSON")
    _common(p)
    p = command(sub, "policy", policy_command, help="change a live run's approval policy",
                description="Change the run's own approval rules (the `set_policy` update, "
                "recorded in its history and audit trail); calls waiting now are answered by the "
                "new rules too.")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    p.add_argument("--rule", action="append", metavar="TOOL=VERDICT",
                   help="approve, deny, ask, deny:MESSAGE, or clear (back to the agent's rule); "
                   "repeatable")
    p.add_argument("--default", choices=("approve", "deny", "ask"),
                   help="the rule of tools no rule names")
    p.add_argument("--by", metavar="NAME", help="who changes it (the audit trail)")
    p.add_argument("--reason", help="why (the audit trail)")
    add_json(p, "print the policy now in force")
    wait_option(p)
