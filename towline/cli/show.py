"""`towline show`: inspect a run by workflow id.

A running run answers the `state` and `messages` queries; a closed one is read from
its result (or, for a failed run, the partial run in its failure's details); the
ledger memo `towline.counters` is the fallback when neither is available.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError, RPCStatusCode

from towline.cli.common import (
    CliError,
    add_connection,
    connect_client,
    one_line,
    resolve_target,
    ui_base,
    workflow_url,
)
from towline.client import run_error
from towline.codec import ENCODING, KEY_ENV
from towline.ledger import MEMO_KEY, decode_counters
from towline.messages import MESSAGES, Message, ModelRequest, Usage
from towline.results import Counters, RunResult

__all__ = [
    "format_call",
    "short",
    "conversation_lines",
    "counters_lines",
    "show_command",
    "register",
]

QUERY_TIMEOUT = timedelta(seconds=5)


def short(value: Any, limit: int = 120) -> str:
    """A one-line rendering of a value (JSON for non-strings), cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_call(tool_name: str, args: dict[str, Any], limit: int = 120) -> str:
    """`add(a=1, b=2)`."""
    inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in args.items())
    return f"{tool_name}({short(inner, limit)})"


def conversation_lines(messages: list[Message], *, full: bool = True) -> list[str]:
    """The conversation as aligned lines: who said what, tool calls and their returns."""
    limit = 10_000 if full else 120
    lines: list[str] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if p.part_kind == "system":
                    lines.append(f"  system     {short(p.content, limit)}")
                elif p.part_kind == "user":
                    lines.append(f"  user       {short(p.content, limit)}")
                elif p.part_kind == "tool_return":
                    lines.append(f"  tool       {p.tool_name} [{p.tool_call_id}] {p.status}: "
                                 f"{short(p.content, limit)}")
                else:
                    lines.append(f"  retry      {short(p.content, limit)}")
        else:
            for p in m.parts:
                if p.part_kind == "text":
                    lines.append(f"  model      {short(p.content, limit)}")
                else:
                    lines.append(f"  model      calls {format_call(p.tool_name, p.args, limit)} "
                                 f"[{p.tool_call_id}]")
    return lines


def counters_lines(counters: Counters, usage: Usage | None) -> list[str]:
    """The ledger (names as in `towline.v1.RunCounters`) and the usage."""
    retries = ", ".join(f"{k}={v}" for k, v in sorted(counters.tool_retries.items())) or "none"
    lines = [
        "Counters (towline.counters):",
        f"  run_step             {counters.run_step}   (max_steps {counters.max_steps})",
        f"  tool_calls           {counters.tool_calls}",
        f"  requests             {counters.requests}",
        (f"  output_retries_used  {counters.output_retries_used}   "
         f"(output_retries {counters.output_retries})"),
        f"  tool_retries         {retries}",
        (f"  tokens               {counters.input_tokens} in, "
         f"{counters.output_tokens} out, {counters.total_tokens} total"),
    ]
    if usage is not None:
        lines.append(f"Usage: {usage.requests} requests, {usage.input_tokens} input tokens, "
                     f"{usage.output_tokens} output tokens")
    return lines


def _when(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"


async def _memo_counters(desc: WorkflowExecutionDescription, codec: PayloadCodec | None) -> Counters | None:
    fields = desc.raw_description.workflow_execution_info.memo.fields
    if MEMO_KEY not in fields:
        return None
    payload = fields[MEMO_KEY]
    if payload.metadata.get("encoding") == ENCODING and codec is None:
        raise CliError(f"run {desc.id!r} is encrypted: pass --encrypt, with the key in {KEY_ENV}")
    try:
        if codec is not None:
            [payload] = await codec.decode([payload])
        return decode_counters(payload)
    except Exception:  # noqa: BLE001 - an unreadable memo is shown as absent, not as a crash
        return None


async def _describe(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription:
    try:
        return await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"no workflow {handle.id!r} in this namespace") from None
        raise CliError(f"cannot describe workflow {handle.id!r}: {one_line(e)}") from None


@dataclass
class _View:
    """What `towline show` prints about a run, gathered from wherever it is available."""

    header: list[str]
    counters: Counters | None = None
    usage: Usage | None = None
    messages: list[Message] | None = None
    notes: list[str] = field(default_factory=list[str])


async def _read_running(view: _View, handle: WorkflowHandle[Any, Any]) -> None:
    """State and messages from the queries (a worker answers them)."""
    try:
        state: dict[str, Any] = await handle.query("state", rpc_timeout=QUERY_TIMEOUT)
        raw: Any = await handle.query("messages", rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError):
        view.notes.append("(no worker answered the queries; counters are from the ledger memo)")
        return
    view.messages = MESSAGES.validate_python(raw)
    if "counters" in state:
        view.counters = Counters.model_validate(state["counters"])
        view.usage = Usage.model_validate(state["usage"])
    view.header.append(f"Run state {state.get('status', '?')}")
    pending: dict[str, dict[str, Any]] = state.get("pending_approvals") or {}
    for call_id, info in pending.items():
        call = format_call(str(info.get("tool_name")), dict(info.get("args") or {}))
        view.notes.append(f"Waiting for approval: {call}  call id {call_id}  "
                          f"(towline approve {handle.id} {call_id})")


async def _read_completed(view: _View, client: Client, desc: WorkflowExecutionDescription) -> None:
    """Counters, usage, conversation and output from the run's result."""
    handle = client.get_workflow_handle(desc.id, run_id=desc.run_id, result_type=RunResult)
    result = await handle.result()
    view.counters, view.usage, view.messages = result.counters, result.usage, result.messages
    output = result.output
    view.notes += ["Output:", output if isinstance(output, str) else json.dumps(output, indent=2)]


async def _read_failed(view: _View, handle: WorkflowHandle[Any, Any]) -> None:
    """The failure reason, and the partial run its details carry."""
    try:
        await handle.result()
    except WorkflowFailureError as e:
        err = run_error(e)
        view.header.append(f"Failure   {err.reason}: {one_line(err.message)}")
        partial = err.partial
        if partial is not None:
            view.counters, view.usage, view.messages = partial.counters, partial.usage, partial.messages


async def show_command(args: Any) -> int:
    """`towline show WORKFLOW_ID`."""
    target = resolve_target(args.address, args.namespace, encrypt=args.encrypt)
    client = await connect_client(target)
    handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(args.workflow_id)
    desc = await _describe(handle)
    if desc.workflow_type != "AgentRun":
        raise CliError(f"workflow {args.workflow_id!r} is a {desc.workflow_type}, not an AgentRun")
    status = desc.status.name if desc.status is not None else "UNKNOWN"
    view = _View(header=[
        f"Run       {desc.id}  (run id {desc.run_id})",
        f"Status    {status}",
        f"Queue     {desc.task_queue}",
        f"Started   {_when(desc.start_time)}   Closed {_when(desc.close_time)}",
    ], counters=await _memo_counters(desc, client.data_converter.payload_codec))
    url = workflow_url(ui_base(target, args.ui_url), target.namespace, desc.id)
    if url:
        view.header.append(f"UI        {url}")
    if desc.status == WorkflowExecutionStatus.RUNNING:
        await _read_running(view, handle)
    elif desc.status == WorkflowExecutionStatus.COMPLETED:
        await _read_completed(view, client, desc)
    elif desc.status == WorkflowExecutionStatus.FAILED:
        await _read_failed(view, handle)
    out = list(view.header)
    if view.counters is not None:
        out.extend(counters_lines(view.counters, view.usage))
    out.extend(view.notes)
    if view.messages is not None:
        out.append("Conversation:")
        out.extend(conversation_lines(view.messages) or ["  (empty)"])
    print("\n".join(out))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """`towline show`."""
    p = sub.add_parser("show", help="print a run's status, counters, usage and conversation",
                       description="Print a run's status, ledger counters, usage and conversation "
                       "(from the queries while it runs, from its result or failure afterwards).")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    p.add_argument("--ui-url", metavar="URL", help="base URL of the Temporal UI")
    add_connection(p)
    p.set_defaults(handler=show_command)
