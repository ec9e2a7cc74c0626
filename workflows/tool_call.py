"""Running one admitted tool call: as an activity, or in the workflow for a tool that runs
there, and what each way of failing means for its return record.

A non-idempotent activity that failed after its function may have started is `unknown`
(its effect is uncertain and the run fails `UncertainToolEffect`), unless its heartbeat
proves that the function never started. An idempotent one, or one that certainly never ran,
is `failed` and counts as a retry.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeout

from towline.activities.io import ENTERED_KEY, TOO_LARGE, USAGE_OUT_OF_RANGE, ToolActivityResult
from towline.errors import (
    ModelRetry,
    PayloadTooLarge,
    RunFailure,
    ToolError,
    UsageLimitExceeded,
    is_runtime_failure,
)
from towline.messages import ToolCallPart, ToolReturnStatus, Usage
from towline.runtime.escapes import raised_name
from towline.telemetry import tracing as telemetry
from towline.tools import Tool, ToolContext, ToolResult, tool_content

from .approvals import Resolution
from .guard import Guard, guarded, is_user_code
from .hooks import maybe_await
from .mcp_tools import not_started, tool_activity_input
from .run import Run

__all__ = ["Admitted", "ClientResults", "run_one"]


class ClientResults(Protocol):
    """What waits for a client tool's result: the run's approvals desk
    (`approval_updates.ApprovalDesk`), which `AgentRun`'s `tool_result` and `respond` updates give it; handed to the tool calls by the workflow."""

    async def client_result(self, ctx: ToolContext, call: ToolCallPart, timeout: Any, *,
                            metadata: Mapping[str, Any] | None = None) -> Resolution: ...


@dataclass
class Admitted:
    """One admitted call, ready to run: its record's index in the batch, the call after
    every `before_tool_execute` hook, the tool and its context."""

    index: int
    call: ToolCallPart
    tool: Tool
    ctx: ToolContext
    state: dict[str, Any] | None = None
    """The `ToolResult.state` update the tool returned, if any."""
    cancelled: bool = False
    """The activity was cancelled (the run was cancelled while it ran)."""
    failure: RunFailure | None = None
    """What the call's report fails the run with (a state update too large, a usage the
    ledger cannot record: the tool ran, but what it reported cannot be kept)."""
    ran: ToolReturnStatus | None = None
    """The status the tool itself returned (a `before_tool_return` hook may show the model
    another): its `ToolResult.state` is applied when it succeeded."""


def _short(args: Mapping[str, Any], limit: int = 60) -> str:
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def run_one(run: Run, c: Admitted,
                  client: ClientResults) -> tuple[ToolReturnStatus, Any, Usage]:
    """Run the call; its return status, content and usage (`c.state`: its state update). A
    client tool's result comes from `client`."""
    tool, call = c.tool, c.call
    if tool.executor == "client":
        return await _run_on_client(run, c, client)
    if tool.in_workflow:
        with telemetry.workflow_tool_span(tool.name, call.tool_call_id):
            return await _run_in_workflow(c)
    # a non-idempotent tool may go without an entry mark (Tool.entry_mark=False)
    marked = tool.idempotent or tool.entry_mark
    inp = tool_activity_input(tool, call.args, c.ctx, entry_mark=marked)
    try:
        res = await workflow.execute_activity(
            tool.activity_name, inp, result_type=ToolActivityResult,
            start_to_close_timeout=tool.start_to_close_timeout,
            heartbeat_timeout=tool.heartbeat_timeout or run.agent.tool_heartbeat_timeout,
            retry_policy=tool.effective_retry_policy(),
            summary=f"{tool.name}({_short(call.args)})",
            priority=run.dispatch.priority,  # fleet: the run's
        )
    except ActivityError as e:
        cause = e.cause or e
        if isinstance(cause, CancelledError):
            c.cancelled = True
            return "unknown", "the run was cancelled while the tool ran: its effect is unknown", Usage()
        if isinstance(cause, ApplicationError) and cause.type in REPORT_FAILURES:
            c.failure = REPORT_FAILURES[cause.type](f"call {call.tool_call_id}: {cause.message}")
            return "unknown" if not tool.idempotent else "failed", cause.message, Usage()
        if tool.idempotent or not_started(cause):  # retried, or certainly without effect
            return "failed", f"failed after retries: {cause}", Usage()
        if marked and _never_entered(cause):
            reason = f"not executed: every attempt lost its worker before the tool started ({cause})"
            return "not_executed", reason, Usage()
        return "unknown", f"{type(cause).__name__}: {cause}", Usage()
    c.state = res.state
    return res.status, res.content, res.usage


REPORT_FAILURES: dict[str | None, type[RunFailure]] = {
    TOO_LARGE: PayloadTooLarge, USAGE_OUT_OF_RANGE: UsageLimitExceeded,
}
"""The run failure of a tool activity that ran but reported what cannot be kept."""


def _never_entered(cause: BaseException) -> bool:
    """Whether a timed-out attempt's last heartbeat proves the tool function never started."""
    if not isinstance(cause, ActivityTimeout):
        return False
    return not any(isinstance(d, dict) and ENTERED_KEY in d for d in cause.last_heartbeat_details)


async def _run_on_client(run: Run, c: Admitted, client: ClientResults
                         ) -> tuple[ToolReturnStatus, Any, Usage]:
    """A client tool: the run waits durably for its result (`tool_result`, `towline respond`).

    A session's call waits at most its `session_timeout` (the client that went away
    never answers), and the client may answer with an error (the call `failed`) or a retry
    request (`retry`, as a tool's `ModelRetry`); both count against the tool's `max_retries`."""
    timeout, within = c.tool.client_timeout, ""
    if run.inventory.client_wait is not None and (timeout is None or run.inventory.client_wait < timeout):
        timeout, within = run.inventory.client_wait, " (the session's session_timeout)"
    resolution = await client.client_result(c.ctx, c.call, timeout,
                                             metadata=dict(c.tool.metadata) or None)
    if resolution.kind == "error":
        return "failed", resolution.reason, Usage()
    if resolution.kind == "retry":
        return "retry", resolution.reason, Usage()
    if resolution.kind != "timeout":
        return "succeeded", tool_content(resolution.result), Usage()
    if c.tool.idempotent:  # may be asked again: the model is told
        return "denied", f"no result from the client within {timeout}{within}", Usage()
    return "unknown", (f"no result from the client within {timeout}{within}: the client may "
                       "have run it (declare the tool idempotent to let the model call it "
                       "again)"), Usage()


async def _run_in_workflow(c: Admitted) -> tuple[ToolReturnStatus, Any, Usage]:
    parsed = c.tool.args_model.model_validate(c.call.args)
    kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
    args = (c.ctx,) if c.tool.takes_ctx else ()
    call = functools.partial(c.tool.function, **kwargs)
    guard = Guard(f"tool {c.tool.name!r}", capability=f"tool {c.tool.name!r}", hook=c.tool.name)
    try:
        if is_user_code(c.tool.function):
            result = await guarded(guard, call, *args)
        else:  # towline's own (a sub-agent's delegation, write_todos)
            result = await maybe_await(call(*args))
    except ModelRetry as e:
        return "retry", e.message, Usage()
    except ToolError as e:
        return "failed", e.message, e.usage or Usage()
    except Exception as e:  # like an activity that raised: the effect is uncertain
        if is_runtime_failure(e):
            raise  # e.g. the tool did something that would not replay: the run fails
        detail = f"{raised_name(e)}: {e}"
        if c.tool.idempotent:
            return "failed", f"failed: {detail}", Usage()
        return "unknown", detail, Usage()
    if isinstance(result, ToolResult):
        c.state = result.state
        return "succeeded", tool_content(result.content), result.usage
    return "succeeded", tool_content(result), Usage()
