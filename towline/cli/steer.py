"""`towline send` and `cancel`: steer a live run by workflow id (and the helpers the decision
commands of `towline.cli.review` share).

`send` and the decisions are workflow updates: a worker must apply them. Before
sending one the command checks that some worker polls the run's task queue (so
"nobody is there" is said at once, not after a timeout), then waits for the
worker to accept it (`--wait`); `send` then waits for the run's answer unless
`--no-wait`. `cancel` is a signal: Temporal records it even with no worker
running, and the run ends with reason `Cancelled` when a worker next runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode

from towline.cli.args import Subcommands, add_json, command
from towline.cli.common import CliError, connected, one_line
from towline.cli.runstate import agent_name, describe_run, workers_polling

__all__ = ["send_command", "cancel_command", "register", "live_run", "require_worker",
           "accepted_update", "refused", "start_hint", "ACCEPT_WAIT", "wait_option"]

ACCEPT_WAIT = 30.0
"""Default seconds to wait for a worker to accept an update."""


async def live_run(client: Client, workflow_id: str, what: str) -> tuple[
        WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The handle and description of a live run; `CliError` if it is gone or has ended."""
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    desc = await describe_run(handle)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        status = desc.status.name if desc.status is not None else "UNKNOWN"
        raise CliError(f"run {workflow_id!r} has ended ({status}); nothing can {what} it")
    return handle, desc


async def start_hint(client: Client, desc: WorkflowExecutionDescription) -> str:
    agent = await agent_name(client, desc)
    who = f"agent {agent!r}" if agent else "its agent"
    return (f"start a worker for {who} on task queue {desc.task_queue!r}: towline worker --agent "
            f"MODULE:ATTR --task-queue {desc.task_queue} (or towline dev --agent MODULE:ATTR)")


async def require_worker(client: Client, desc: WorkflowExecutionDescription, what: str) -> None:
    """Fail at once when no worker polls the run's task queue (an update would only time out)."""
    if await workers_polling(client, desc.task_queue, datetime.now(UTC)) is False:
        raise CliError(f"no worker is polling task queue {desc.task_queue!r}, so nothing can "
                       f"apply the {what}; {await start_hint(client, desc)}")


def refused(name: str, workflow_id: str, e: WorkflowUpdateFailedError) -> CliError:
    cause = e.cause
    reason = cause.message if isinstance(cause, FailureError) else one_line(cause or e)
    return CliError(f"{name} refused by run {workflow_id!r}: {one_line(reason)}")


async def accepted_update(
    client: Client, handle: WorkflowHandle[Any, Any], desc: WorkflowExecutionDescription,
    name: str, arg: Any, wait: float,
) -> WorkflowUpdateHandle[Any]:
    """Start update `name` and wait (up to `wait` s) until a worker accepted or rejected it."""
    try:
        update: WorkflowUpdateHandle[Any] = await asyncio.wait_for(
            handle.start_update(name, arg, wait_for_stage=WorkflowUpdateStage.ACCEPTED), wait)  # pyright: ignore[reportUnknownMemberType]
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        hint = await start_hint(client, desc)
        raise CliError(f"no worker answered the {name} within {wait:g}s (is the worker for run "
                       f"{handle.id!r} stopped or overloaded?); {hint}") from None
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"run {handle.id!r} has ended; nothing can {name} it") from None
        raise CliError(f"{name} failed: {one_line(e)}") from None
    try:  # a rejection (validator) comes back with its outcome already known
        await asyncio.wait_for(update.result(), 0.2)
    except WorkflowUpdateFailedError as e:
        raise refused(name, handle.id, e) from None
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        pass  # accepted, still running
    return update


async def send_command(args: Any) -> int:
    """`towline send WORKFLOW_ID MESSAGE`: the `send` update; prints the run's answer."""
    from towline.workflows import SendInput

    if not args.message.strip():
        raise CliError("the message is empty", 2)
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, "send to")
    await require_worker(client, desc, "send")
    update = await accepted_update(client, handle, desc, "send", SendInput(content=args.message),
                             args.wait)
    if args.no_wait:
        print(f"sent to run {args.workflow_id} (update {update.id}); its answer will be in "
              f"`towline show {args.workflow_id}`", file=sys.stderr)
        return 0
    try:
        answer: Any = await update.result()
    except WorkflowUpdateFailedError as e:
        raise refused("send", handle.id, e) from None
    if args.json:
        print(json.dumps(answer, indent=2, ensure_ascii=False))
    elif isinstance(answer, str):
        print(answer)
    else:
        print(json.dumps(answer, indent=2, ensure_ascii=False))
    return 0


async def cancel_command(args: Any) -> int:
    """`towline cancel WORKFLOW_ID`: the `cancel` signal."""
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, "cancel")
    try:
        await handle.signal("cancel")
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"run {handle.id!r} has ended; nothing can cancel it") from None
        raise CliError(f"cancel failed: {one_line(e)}") from None
    print(f"cancel requested for run {args.workflow_id}: it ends with reason Cancelled at its "
          "next step (at once if it is waiting)")
    if await workers_polling(client, desc.task_queue, datetime.now(UTC)) is False:
        print(f"note: no worker is polling task queue {desc.task_queue!r}; the run ends when one "
              f"does ({await start_hint(client, desc)})", file=sys.stderr)
    return 0


def wait_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, default=ACCEPT_WAIT, metavar="SECONDS",
                   help=f"how long to wait for a worker to accept it (default: {ACCEPT_WAIT:g})")


def register(sub: Subcommands) -> None:
    """`towline send` and `cancel`."""
    p = command(sub, "send", send_command,
                help="send the next user message to a session and print the answer",
                description="Execute the `send` update of a session (a run started with `towline "
                "run --session`, or `session=True`): the message is the next user turn, and the "
                "run's answer to it is printed.")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    p.add_argument("message", metavar="MESSAGE")
    p.add_argument("--no-wait", action="store_true",
                   help="return once the run accepted the message, without waiting for the answer")
    add_json(p, "print the answer as JSON")
    wait_option(p)

    p = command(sub, "cancel", cancel_command, help="cancel a run (the `cancel` signal)",
                description="Send the `cancel` signal: the run ends with reason Cancelled at its "
                "next step, at once if it waits (for an approval or a session's next message), "
                "with its partial run. To end a run without running any more of its code, use "
                "Temporal's CLI: temporal workflow terminate.")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
