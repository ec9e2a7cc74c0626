"""towline fork / towline reset: branch a run at a step, or rewind it (issue 22).

`towline fork RUN --at-step N` starts a new run from RUN's conversation before step
N's model request (`towline.timetravel.travel.fork`); it prints the new run's id (with
`--wait`, its answer). `towline reset RUN --to-step N` is Temporal's reset to the
workflow task that scheduled step N's request; it refuses, listing them, when tool
calls after that point may have taken effect and are not idempotent, unless `--yes`.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from towline.cli.args import Subcommands, add_json, add_ui_url, command, model_string, positive
from towline.cli.common import EXIT_USAGE, CliError, connected, one_line, ui_base, workflow_url
from towline.cli.render import print_json, print_out
from towline.cli.runstate import workers_polling
from towline.client import is_own_queue, run_error
from towline.timetravel.travel import (
    NotIdempotent,
    ResetPlan,
    TimeTravelError,
    UnknownStep,
    plan_fork,
    plan_reset,
    reset,
    start_fork,
)

__all__ = ["register", "fork_command", "reset_command"]


def _error(e: TimeTravelError) -> CliError:
    return CliError(str(e), EXIT_USAGE if isinstance(e, UnknownStep) else 1)


async def _worker_note(client: Client, task_queue: str, what: str) -> None:
    if is_own_queue(task_queue):  # its worker ended with its command, a moment ago perhaps
        print(f"note: task queue {task_queue!r} was one towline run command's own; {what} when "
              f"a worker polls it (towline worker --agent MODULE:ATTR --task-queue {task_queue})",
              file=sys.stderr)
    elif await workers_polling(client, task_queue, datetime.now(UTC)) is False:
        print(f"note: no worker is polling task queue {task_queue!r}; {what} when one does "
              "(towline worker --agent MODULE:ATTR, or towline dev --agent MODULE:ATTR)",
              file=sys.stderr)


async def fork_command(args: Any) -> int:
    """`towline fork RUN --at-step N [--prompt TEXT] [--model M] [--id ID] [--wait]`."""
    client, target = await connected(args)
    try:
        plan = await plan_fork(client, args.run, at_step=args.at_step, prompt=args.prompt,
                               model=args.model)
        handle = await start_fork(client, plan, id=args.id, task_queue=args.task_queue)
    except TimeTravelError as e:
        raise _error(e) from None
    except WorkflowAlreadyStartedError:
        raise CliError(f"a run with id {args.id!r} already exists; choose another --id") from None
    except RPCError as e:  # e.g. a conversation too large for the start request
        raise CliError(f"Temporal refused to start the fork: {one_line(e)}") from None
    queue = args.task_queue or plan.task_queue
    url = workflow_url(ui_base(target, args.ui_url), target.namespace, handle.id)
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if not args.json:
        print(f"Forked {args.run} at step {args.at_step} as {handle.id} (agent {plan.input.agent}, "
              f"task queue {queue})" + (f"\nUI {url}" if url else ""), file=sys.stderr)
    await _worker_note(client, queue, "the fork starts")
    result: Any = None
    if args.wait:
        try:
            result = await handle.result()
        except WorkflowFailureError as e:
            failure = run_error(e)
            raise CliError(f"fork {handle.id} failed: {failure.reason}: {one_line(failure.message)}") \
                from None
    if args.json:
        print_json({"workflow_id": handle.id, "forked_from": plan.origin.model_dump(),
                    "agent": plan.input.agent, "task_queue": queue, "ui_url": url,
                    "notes": plan.notes,
                    **({"result": result.model_dump(mode="json")} if result is not None else {})})
    elif result is not None:
        if isinstance(result.output, str):
            print(result.output)
        else:
            print_json(result.output)
    else:
        print(handle.id)
    return 0


def _listing(calls: list[Any]) -> list[str]:
    return [f"  {c.line()}" for c in calls]


async def reset_command(args: Any) -> int:
    """`towline reset RUN --to-step N [--reason R] [--yes]`."""
    client, _ = await connected(args)
    try:
        plan: ResetPlan = await plan_reset(client, args.run, to_step=args.to_step)
        new_run = await reset(client, args.run, to_step=args.to_step, reason=args.reason,
                              force=args.yes, plan=plan)
    except NotIdempotent as e:
        print_out(args.json, {"refused": str(e), "calls": [_call_json(c) for c in e.calls]},
                  [("Tool calls that would run again (they may have taken effect and are not "
                    "idempotent):"), *_listing(e.calls)])
        raise CliError(str(e)) from None
    except TimeTravelError as e:
        raise _error(e) from None
    print_out(args.json, {"workflow_id": args.run, "step": args.to_step, "event_id": plan.event_id,
                          "reset_execution": plan.execution, "new_execution": new_run,
                          "rerun": [_call_json(c) for c in plan.rerun]}, lambda: [
        f"Reset run {args.run} to step {args.to_step} (workflow task event {plan.event_id}); "
        + f"it goes on as execution {new_run}.",
        *(["Tool calls that run again:", *_listing(plan.rerun)] if plan.rerun else [])])
    await _worker_note(client, plan.task_queue, "the run goes on")
    return 0


def _call_json(call: Any) -> dict[str, Any]:
    return {"step": call.step, "tool": call.tool, "call_id": call.call_id, "args": call.args,
            "idempotent": call.idempotent, "outcome": call.outcome}


def _prompt(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the prompt is empty")
    return text


def register(sub: Subcommands) -> None:
    """`towline fork` and `towline reset`."""
    p = command(
        sub, "fork", fork_command,
        help="start a new run from a run's conversation before one of its steps",
        description="Start a new run of the same agent whose conversation is RUN's as the "
        "model was sent it at step N, before that request, with the contributed state RUN had "
        "then. Its counters start at zero (a fork is a new run); its lineage is in memo "
        "towline.forked_from and the TowlineForkedFrom search attribute. Without --prompt the "
        "model is asked step N again; with it, the prompt follows as a new user message. "
        "Prints the new run's id (with --wait: its answer).")
    p.add_argument("run", metavar="RUN", help="the workflow id of the run to fork")
    p.add_argument("--at-step", type=positive, required=True, metavar="N",
                   help="the step to fork before (its model request is made again)")
    p.add_argument("--prompt", type=_prompt, metavar="TEXT",
                   help="a new user message after the conversation")
    p.add_argument("--model", type=model_string, metavar="M",
                   help="run the fork on this model (one its worker allows)")
    p.add_argument("--id", metavar="ID", help="the new run's workflow id "
                   "(default: RUN-forkN-<random>)")
    p.add_argument("--task-queue", metavar="QUEUE", help="the new run's task queue (default: RUN's)")
    p.add_argument("--wait", action="store_true", help="wait for the fork's answer and print it")
    add_json(p, "print the new run (and result) as JSON")
    add_ui_url(p)

    p = command(
        sub, "reset", reset_command,
        help="rewind a run to one of its steps (Temporal's reset)",
        description="Reset RUN with Temporal's ResetWorkflowExecution to the workflow task that "
        "scheduled step N's model request: its history is kept up to there and the run goes on "
        "on today's workers, making step N's request again (its ledger is what the history "
        "says). Tool calls after that point run again: if any may have taken effect and its "
        "tool is not declared idempotent, the reset is refused, listing them, unless --yes.")
    p.add_argument("run", metavar="RUN", help="the workflow id of the run to reset")
    p.add_argument("--to-step", type=positive, required=True, metavar="N",
                   help="the step whose model request is made again")
    p.add_argument("--reason", metavar="R", help="recorded with the reset in the history")
    p.add_argument("--yes", action="store_true",
                   help="reset even if non-idempotent tool calls would run again")
    add_json(p, "print the outcome as JSON")
