"""`towline approve` and `towline reject`: steer a run by workflow id."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode

from towline.cli.common import CliError, add_connection, connect_client, one_line, resolve_target

__all__ = ["decision_command", "register"]


async def _update(handle: WorkflowHandle[Any, Any], name: str, call_id: str, reason: str | None) -> str:
    from towline.workflows import ApprovalDecision

    decision = ApprovalDecision(call_id=call_id, reason=reason)
    result: Any = await handle.execute_update(name, decision, result_type=str)  # pyright: ignore[reportUnknownMemberType]
    return str(result)


async def decision_command(args: Any) -> int:
    """`towline approve|reject WORKFLOW_ID CALL_ID`: execute the workflow's update."""
    name: str = args.command
    target = resolve_target(args.address, args.namespace, encrypt=args.encrypt)
    client: Client = await connect_client(target)
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(args.workflow_id)
    try:
        await asyncio.wait_for(_update(handle, name, args.call_id, args.reason), args.wait)
    except WorkflowUpdateFailedError as e:
        cause = e.cause
        reason = cause.message if isinstance(cause, FailureError) else one_line(cause or e)
        raise CliError(f"{name} refused by run {args.workflow_id!r}: {one_line(reason)}") from None
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"no running workflow {args.workflow_id!r} in this namespace") from None
        raise CliError(f"{name} failed: {one_line(e)}") from None
    except TimeoutError:
        raise CliError(f"no worker answered within {args.wait:g}s; is a worker for this run "
                       f"running (towline worker --agent ...)?") from None
    done = "approved" if name == "approve" else "rejected"
    print(f"{done} tool call {args.call_id} in run {args.workflow_id}", file=sys.stdout)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """`towline approve` and `towline reject`."""
    for name, verb in (("approve", "approve"), ("reject", "reject")):
        p = sub.add_parser(name, help=f"{verb} a tool call waiting for approval",
                           description=f"Execute the `{name}` update of a run whose tool call "
                           "waits for approval (see `towline show` for the call id).")
        p.add_argument("workflow_id", metavar="WORKFLOW_ID")
        p.add_argument("call_id", metavar="CALL_ID")
        p.add_argument("--reason", help="recorded with the decision (told to the model on reject)")
        p.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                       help="how long to wait for a worker to apply it (default: 30)")
        add_connection(p)
        p.set_defaults(handler=decision_command)
