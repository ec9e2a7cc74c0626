"""`towline send`, `end` and `cancel`: steer a live run by workflow id (and the helpers the
decision commands of `towline.cli.review` share).

`send` and the decisions are workflow updates: a worker must apply them. Before
sending one the command checks that some worker polls the run's task queue (so
"nobody is there" is said at once, not after a timeout, and nothing is sent), then waits for
the worker to accept it (`--wait`, the whole command's budget). One that no worker took in
time is reported as what it is (`towline.review.delivery`): pending, exit code 3, when the
server holds it (a worker that starts applies it), not delivered otherwise; `send` then waits for the run's answer unless
`--no-wait`; a run that has ended (before, or while the message waited) is reported with
its failure's reason and message. `cancel` is a signal: Temporal records it even with no worker
running, and the run ends with reason `Cancelled` when a worker next runs it. `end` is a
signal too: a session completes, with its last answer as output and `session_end` "request",
once it has answered what it was sent.
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
)
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.workflow import UpdateMethodMultiParam

from towline.cli.args import Subcommands, add_json, command
from towline.cli.common import EXIT_PENDING, CliError, connected, one_line
from towline.cli.runstate import agent_name, describe_run, task_failure, workers_polling
from towline.client import RunHandle, ended_run
from towline.errors import DecisionNotApplied, DecisionPending
from towline.review.delivery import ACCEPT_WAIT, deliver, update_name

__all__ = ["send_command", "cancel_command", "end_command", "register", "live_run", "require_worker",
           "accepted_update", "refused", "start_hint", "ACCEPT_WAIT", "wait_option"]


async def live_run(client: Client, workflow_id: str, what: str) -> tuple[
        WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The handle and description of a live run; `CliError` if it is gone or has ended."""
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    desc = await describe_run(handle)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise await _ended(handle, desc, what)
    return handle, desc


async def _ended(handle: WorkflowHandle[Any, Any], desc: WorkflowExecutionDescription,
                 what: str) -> CliError:
    """Why nothing can `what` the run any more: it has ended, and, when it failed, with what
    reason and message (a `GuardrailTripped` names its guardrail)."""
    status = desc.status.name if desc.status is not None else "UNKNOWN"
    said = f"run {handle.id!r} has ended ({status}); nothing can {what} it"
    if desc.status == WorkflowExecutionStatus.FAILED:
        ended = await ended_run(handle)
        if ended is not None and ended.reason != status:  # its result is there (retention)
            said += f". It failed: {ended.reason}: {one_line(ended.message)}"
    return CliError(said)


async def _ended_meanwhile(client: Client, workflow_id: str, what: str) -> CliError | None:
    """The run's end (`_ended`) if it ended while a command waited on it, else None."""
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
    try:
        desc = await handle.describe()
    except RPCError:
        return None
    if desc.status == WorkflowExecutionStatus.RUNNING:
        return None
    return await _ended(handle, desc, what)


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


def _rpc_failed(e: RPCError, workflow_id: str, what: str) -> CliError:
    """The error for an update or signal `what` the server refused (NOT_FOUND: the run ended)."""
    if e.status == RPCStatusCode.NOT_FOUND:
        return CliError(f"run {workflow_id!r} has ended; nothing can {what} it")
    return CliError(f"{what} failed: {one_line(e)}")


def refused(name: str, workflow_id: str, e: WorkflowUpdateFailedError) -> CliError:
    cause = e.cause
    reason = cause.message if isinstance(cause, FailureError) else one_line(cause or e)
    return CliError(f"{name} refused by run {workflow_id!r}: {one_line(reason)}")


async def _failing_task(client: Client, handle: WorkflowHandle[Any, Any], name: str) -> None:
    """`CliError` when no worker took the update because the run's workflow task keeps failing
    (a replay that takes another path, say): a worker that starts would not apply it either."""
    try:
        failure = await task_failure(client, await handle.describe())
    except RPCError:
        return
    if failure is None or failure.attempt == 0:
        return
    raise CliError(f"no worker can apply the {name}: run {handle.id!r}'s workflow task keeps "
                   f"failing (attempt {failure.attempt}, {failure.cause}: "
                   f"{one_line(failure.message, 200)}); `towline runs --stuck` says what to do")


async def accepted_update(
    client: Client, handle: WorkflowHandle[Any, Any], desc: WorkflowExecutionDescription,
    update_method: UpdateMethodMultiParam[[Any, Any], Any], arg: Any, wait: float,
    waited: float | None = None,
) -> WorkflowUpdateHandle[Any]:
    """Start `update_method` (e.g. `AgentRun.send`) and wait (up to `wait` s, what is left of
    `waited`, the command's `--wait`) until a worker accepted or rejected it; `CliError` with
    code `EXIT_PENDING` when the server holds it but no worker took it."""
    name = update_name(update_method)
    try:
        update = await deliver(handle, update_method, arg, wait, waited=waited)
    except DecisionNotApplied as e:
        await _failing_task(client, handle, name)
        if not isinstance(e, DecisionPending):  # not delivered, or not known
            raise CliError(f"{e.message}; {await start_hint(client, desc)}") from None
        raise CliError(f"{e.message} (`towline show {handle.id}` shows it once applied; is the "
                       f"worker for run {handle.id!r} stopped or overloaded?); "
                       f"{await start_hint(client, desc)}", EXIT_PENDING, "pending") from None
    except RPCError as e:
        raise _rpc_failed(e, handle.id, name) from None
    try:  # a rejection (validator) comes back with its outcome already known
        await asyncio.wait_for(update.result(), 0.2)
    except WorkflowUpdateFailedError as e:
        raise refused(name, handle.id, e) from None
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        pass  # accepted, still running
    return update


async def send_command(args: Any) -> int:
    """`towline send WORKFLOW_ID MESSAGE`: the `send` update; prints the run's answer."""
    from towline.workflows import AgentRun, SendInput

    if not args.message.strip():
        raise CliError("the message is empty", 2)
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, "send to")
    await require_worker(client, desc, "send")
    try:
        update = await accepted_update(client, handle, desc, AgentRun.send,
                                       SendInput(content=args.message), args.wait)
        if args.no_wait:
            print(f"sent to run {args.workflow_id} (update {update.id}); its answer will be in "
                  f"`towline show {args.workflow_id}`", file=sys.stderr)
            return 0
        try:
            answer: Any = await update.result()
        except WorkflowUpdateFailedError as e:
            raise refused("send", handle.id, e) from None
    except CliError:
        # the run ended while the message waited (a guardrail tripped on it, say): Temporal
        # only says the workflow completed first; the run's own failure says why
        ended = await _ended_meanwhile(client, args.workflow_id, "send to")
        if ended is not None:
            raise ended from None
        raise
    print(answer if isinstance(answer, str) and not args.json
          else json.dumps(answer, indent=2, ensure_ascii=False))
    return 0


async def _signal_command(args: Any, signal: str, what_then: str) -> int:
    """Send the run named by `args` the signal `signal` (`cancel` or `end`), say `what_then`
    happens, and note when no worker polls its task queue (the run ends only once one does)."""
    client, _ = await connected(args)
    handle, desc = await live_run(client, args.workflow_id, signal)
    run = RunHandle(handle)
    try:
        await (run.cancel() if signal == "cancel" else run.end())
    except RPCError as e:
        raise _rpc_failed(e, handle.id, signal) from None
    print(f"{signal} requested for run {args.workflow_id}: {what_then}")
    if await workers_polling(client, desc.task_queue, datetime.now(UTC)) is False:
        print(f"note: no worker is polling task queue {desc.task_queue!r}; the run ends when one "
              f"does ({await start_hint(client, desc)})", file=sys.stderr)
    return 0


async def cancel_command(args: Any) -> int:
    """`towline cancel WORKFLOW_ID`: the `cancel` signal."""
    return await _signal_command(args, "cancel", "it ends with reason Cancelled at its next "
                                 "step (at once if it is waiting)")


async def end_command(args: Any) -> int:
    """`towline end WORKFLOW_ID`: the `end` signal (a session completes after its answer)."""
    return await _signal_command(args, "end", "once it has answered what it was sent, it "
                                 "completes with its last answer (ended by request)")


def wait_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, default=ACCEPT_WAIT, metavar="SECONDS",
                   help="how long, in all, to wait for a worker to take it; then it is "
                   "reported pending (exit code 3: the server holds it, a worker that starts "
                   f"applies it) or not delivered (default: {ACCEPT_WAIT:g})")


def register(sub: Subcommands) -> None:
    """`towline send`, `end` and `cancel`."""
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

    p = command(sub, "end", end_command, help="end a session cleanly (the `end` signal)",
                description="Send the `end` signal: a session (towline run --session) completes "
                "once it has answered what it was sent, its last answer as output, and its "
                "result says it ended by request (RunResult.session_end \"request\"; towline "
                "show prints it). A message sent after it is refused. To stop a run mid-turn, "
                "use towline cancel.")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")

    p = command(sub, "cancel", cancel_command, help="cancel a run (the `cancel` signal)",
                description="Send the `cancel` signal: the run ends with reason Cancelled at its "
                "next step, at once if it waits (for an approval or a session's next message), "
                "with its partial run. To end a run without running any more of its code, use "
                "Temporal's CLI: temporal workflow terminate.")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
