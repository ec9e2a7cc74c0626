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
import asyncio
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.workflow import UpdateMethodMultiParam

from towline.cli.args import Subcommands, add_json, command
from towline.cli.common import CliError, connected
from towline.cli.render import format_call, print_json
from towline.cli.runstate import QUERY_TIMEOUT, query_state
from towline.cli.steer import accepted_update, live_run, refused, require_worker, wait_option
from towline.results import PendingApproval
from towline.review import CallNotFound, decision, pick
from towline.review.delivery import update_name

if TYPE_CHECKING:
    from towline.capabilities.approval_rules import DecisionKind

__all__ = ["review_command", "policy_command", "register", "parse_json", "parse_rule"]

_CLIENT_ANSWERS = {"result": "gave the result of", "error": "gave the error of",
                   "retry": "asked the model to retry"}
"""How a client tool call's answer is reported (`tool_result`'s `result`, `error`, `retry`)."""


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


async def _send(handle: WorkflowHandle[Any, Any], desc: Any, client: Any,
                method: UpdateMethodMultiParam[[Any, Any], Any], arg: Any,
                wait: float, waited: float | None = None) -> Any:
    update = await accepted_update(client, handle, desc, method, arg, wait, waited)
    try:
        return await update.result()
    except WorkflowUpdateFailedError as e:
        raise refused(update_name(method), handle.id, e) from None


def _decisions(args: Any, kind: DecisionKind, calls: list[PendingApproval]) -> list[Any]:
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
    if kind == "respond" and args.result is not None:
        options["result"] = parse_json(args.result, "--result")
    if kind == "respond" and args.result is None:  # --error or --retry: a client's answer only
        flag = "--error" if args.error is not None else "--retry"
        if any(c.tool_name == "?" and c.index is None for c in chosen):  # no state was read
            raise CliError(f"run {args.workflow_id!r}: no worker answered its state query, so "
                           f"whether call {args.call} waits for a client is unknown; the "
                           f"{flag} was not sent")
        if args.all or any(c.kind == "approval" for c in chosen):
            raise CliError(f"{flag} answers a client tool's call; a call waiting for approval "
                           "takes --result (or towline reject)", 2)
    if kind == "reject":
        options["message"] = args.message
    return [(c, decision(c, kind, **options)) for c in chosen]


def _single(kind: DecisionKind, c: PendingApproval, d: Any, by: str | None, *,
            error: str | None = None,
            retry: str | None = None) -> tuple[UpdateMethodMultiParam[[Any, Any], Any], Any]:
    """The update (and its argument) for one decision on `c` (`error` / `retry`: a client
    tool's call answered with the error it failed with, or a request to call it again)."""
    from towline.workflows import (
        AgentRun,
        ApprovalDecision,
        EditDecision,
        RespondDecision,
        ToolResultInput,
    )

    common: dict[str, Any] = {"call_id": c.call_id, "digest": c.digest, "reason": d.reason,
                              "by": by, "remember": d.remember, "pattern": d.pattern,
                              "message": d.message}
    if c.kind == "client":
        if kind != "respond":
            raise CliError(f"call {c.call_id} waits for a client tool's result: towline respond "
                           f"RUN {c.call_id} --result JSON", 2)
        answer = {"error": error} if error is not None else {"retry": retry} if retry is not None \
            else {"result": d.result}
        return AgentRun.tool_result, ToolResultInput.model_validate(
            {"call_id": c.call_id, "digest": c.digest, "by": by, **answer})
    if kind == "edit":
        return AgentRun.edit, EditDecision(**common, args=d.args)
    if kind == "respond":
        return AgentRun.respond, RespondDecision(**common, result=d.result)
    return (AgentRun.approve if kind == "approve" else AgentRun.reject), ApprovalDecision(**common)


async def review_command(args: Any) -> int:
    """`towline approve|reject|edit|respond WORKFLOW_ID [CALL]`."""
    kind: DecisionKind = args.command  # the command is named after its decision
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, kind)
    await require_worker(client, desc, kind)
    # `--wait` bounds the whole command: the state query takes at most half of it, the
    # decision the rest (a worker that answers one answers the other at once)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.wait
    half = timedelta(seconds=args.wait / 2)
    try:
        async with asyncio.timeout(half.total_seconds()):
            state = await query_state(handle, min(QUERY_TIMEOUT, half))
    except TimeoutError:
        state = f"the state query got no answer (no worker answered within {half.total_seconds():g}s)"
    if isinstance(state, str):
        if not args.call or args.all:  # nothing to go on but the state
            raise CliError(f"run {args.workflow_id!r}: {state}; the {kind} was not sent")
        calls = [PendingApproval(workflow_id=handle.id, call_id=args.call, tool_name="?",
                                 args={})]  # the run checks it
    else:
        calls = state.pending()
    chosen = _decisions(args, kind, calls)
    if args.all:
        from towline.workflows import AgentRun, Decisions

        entries: list[Any] = await _send(handle, desc, client, AgentRun.decide,
                                         Decisions(decisions=[d for _, d in chosen], by=args.by),
                                         max(deadline - loop.time(), 0.0), args.wait)
    else:
        from towline.workflows.decisions import DECIDED, ToolResultInput

        [(c, d)] = chosen
        method, arg = _single(kind, c, d, args.by, error=getattr(args, "error", None),
                              retry=getattr(args, "retry", None))
        await _send(handle, desc, client, method, arg, max(deadline - loop.time(), 0.0), args.wait)
        entries = [{"call_id": c.call_id, "tool": c.tool_name,
                    "decision": arg.answer if isinstance(arg, ToolResultInput) else DECIDED[kind]}]
    if args.json:
        print_json(entries)
        return 0
    by_id = {c.call_id: c for c, _ in chosen}
    for e in entries:
        c = by_id[e["call_id"]]
        what = _CLIENT_ANSWERS.get(e["decision"], e["decision"])
        tail = f" (remembered for the {args.remember})" if args.remember else ""
        shown = f": #{c.index} {format_call(c.tool_name, c.args)}" if c.index is not None else ""
        print(f"{what} tool call {c.call_id} in run {args.workflow_id}{shown}{tail}")
    return 0


async def policy_command(args: Any) -> int:
    """`towline policy WORKFLOW_ID --rule TOOL=VERDICT ... [--default VERDICT]`."""
    from towline.workflows import AgentRun, PolicyUpdate

    given: list[str] = args.rule or []
    rules = dict(parse_rule(r) for r in given)
    if not rules and args.default is None:
        raise CliError("give at least one --rule TOOL=VERDICT or --default VERDICT", 2)
    update = PolicyUpdate.model_validate({"rules": rules, "default": args.default, "by": args.by,
                                          "reason": args.reason})
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, "change the policy of")
    await require_worker(client, desc, "policy change")
    policy: dict[str, Any] = await _send(handle, desc, client, AgentRun.set_policy, update,
                                         args.wait)
    if args.json:
        print_json(policy)
        return 0
    rules: dict[str, Any] = policy.get("rules") or {}
    shown = ", ".join(f"{k}={v if isinstance(v, str) else 'deny:' + str(v.get('deny'))}"
                      for k, v in rules.items()) or "none"
    print(f"policy of run {args.workflow_id}: rules {shown}; default "
          f"{policy.get('default') or 'the agent’s'}")
    return 0


def _text(flag: str) -> Any:
    """An argparse type for a non-empty text (the update refuses an empty one)."""
    def parse(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"{flag} needs a non-empty text")
        return value
    return parse


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
        if name == "reject":
            p.add_argument("--message", metavar="TEXT",
                           help="what the model is told, exactly (over the tool's configured "
                           "rejection message and the reason; --reason stays in the audit trail)")
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
    answer = p.add_mutually_exclusive_group(required=True)
    answer.add_argument("--result", metavar="JSON", help="the return, as JSON")
    answer.add_argument("--error", metavar="TEXT", type=_text("--error"),
                        help="a client tool's call only: the tool failed on the client with "
                        "TEXT (the call is failed; the model is told TEXT)")
    answer.add_argument("--retry", metavar="TEXT", type=_text("--retry"),
                        help="a client tool's call only: ask the model to call the tool again, "
                        "told TEXT")
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
