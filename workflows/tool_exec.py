"""Tool admission and execution for one model response.

Admission runs before any I/O: duplicate ids, a truncated response and the
`tool_calls_limit` stop the whole batch; then each call is checked against the
inventory, the request's selected (executable) set and ancestor authority, and
its arguments against the prepared validator. Admitted calls pass through every
`before_tool_execute` hook (identity immutable, arguments re-validated), then
execute in parallel, one activity each (`tool_call`). Every call gets exactly one return.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from towline.capabilities.base import CapabilityLike, hook_of
from towline.errors import (
    Cancelled,
    CapabilityViolation,
    DuplicateToolCallId,
    GuardrailTripped,
    PayloadTooLarge,
    RunFailure,
    ToolCallIdentityChanged,
    ToolDenied,
    ToolResponded,
    ToolRetriesExhausted,
    UncertainToolEffect,
    UsageLimitExceeded,
    is_runtime_failure,
    runtime_failure,
)
from towline.events import EventType, tool_end_fields
from towline.messages import ModelResponse, ToolCallPart, ToolReturnPart, ToolReturnStatus, Usage
from towline.runtime.escapes import UserCodeExit, raised_name
from towline.telemetry import tracing as telemetry
from towline.tools import HANDOFF_KEY, ToolContext, ToolDefinition

from .events import emit
from .hooks import (
    apply_reducers,
    call_hook,
    check_jsonable,
    hook_failure,
    where_of,
)
from .mcp_tools import tool_activity_input
from .run import Run, check_state_fits, oversize
from .tool_call import Admitted, ClientResults, run_one
from .tool_return import before_return

__all__ = ["run_tool_calls"]


def _identity(call: ToolCallPart) -> tuple[str, str, str, str]:
    return (call.tool_call_id, call.tool_name, call.kind,
            json.dumps(call.metadata, sort_keys=True, default=str))


class _Batch:
    """The return records of one response's calls, filled in as they are decided."""

    def __init__(self, run: Run, calls: Sequence[ToolCallPart]) -> None:
        self.run = run
        self.calls = list(calls)
        self.returns: dict[int, ToolReturnPart] = {}
        self.usage: dict[int, Usage] = {}
        self.failure: RunFailure | None = None
        self.started: set[int] = set()
        """Calls whose execution started (streaming: their `tool_end` is published as they end)."""

    def record(self, index: int, status: ToolReturnStatus, content: Any) -> None:
        call = self.calls[index]
        self.returns[index] = ToolReturnPart(
            tool_name=call.tool_name, tool_call_id=call.tool_call_id, content=content, status=status
        )

    def fail(self, failure: RunFailure) -> None:
        if self.failure is None:
            self.failure = failure

    def close(self, reason: str) -> None:
        for i in range(len(self.calls)):
            if i not in self.returns:
                self.record(i, "not_executed", reason)


MAX_CALLS_PER_RESPONSE = 1000
"""Most tool calls one model response may ask for: more fails the run
`UsageLimitExceeded` as soon as the response arrives, before any hook sees it or any call runs.
They would run at once, one pending activity each, and Temporal fails every workflow task of a
run past 2,000 pending activities (and, near 10,000 calls, one task's work passes the deadlock
detector): a looping or prompt-injected model would leave the run stuck for good."""


def refuse_too_many_calls(response: ModelResponse, step: int) -> None:
    """Fail the run if `response` asks for more than `MAX_CALLS_PER_RESPONSE` tool calls."""
    count = sum(isinstance(p, ToolCallPart) for p in response.parts)
    if count > MAX_CALLS_PER_RESPONSE:
        raise UsageLimitExceeded(
            f"step {step}'s response asked for {count} tool calls, more than the "
            f"{MAX_CALLS_PER_RESPONSE} one response may make (Temporal keeps at most 2,000 "
            "activities pending per workflow): none was executed")


async def run_tool_calls(
    run: Run,
    caps: Sequence[CapabilityLike],
    calls: Sequence[ToolCallPart],
    selected: Mapping[str, ToolDefinition],
    step: int,
    truncated: bool,
    client: ClientResults,
) -> None:
    """Admit, execute and record `calls` (a client tool's result from `client`); raises the
    run's failure after recording."""
    if not calls:
        return
    batch = _Batch(run, calls)
    ids = [c.tool_call_id for c in calls]
    limit = run.limits.tool_calls_limit
    if len(set(ids)) != len(ids):
        batch.close("duplicate tool call ids in one response: nothing was executed")
        batch.fail(DuplicateToolCallId(f"duplicate tool call ids in step {step}: {ids}"))
    elif truncated:
        batch.close("the response was cut off by the token limit: nothing was executed")
    elif limit is not None and run.ledger.counters.tool_calls + len(calls) > limit:
        batch.close(f"tool_calls_limit {limit} would be exceeded: nothing was executed")
        batch.fail(UsageLimitExceeded(
            f"tool_calls_limit {limit}: {run.ledger.counters.tool_calls} started, {len(calls)} more requested"
        ))
    else:
        ready = await _admit(run, caps, batch, selected, step)
        if batch.failure is None:
            await _execute(run, caps, batch, ready, client)
        batch.close("not executed")
    _account(run, batch, selected)
    run.ledger.merge_reported_usage()
    run.conversation.record_returns([batch.returns[i] for i in range(len(calls))])
    for i, ret in sorted(batch.returns.items()):  # streaming: calls that never started end here
        if i not in batch.started:
            _emit_end(run, step, ret)
    telemetry.tool_returns(run.agent.name, ((r.tool_name, r.status) for r in batch.returns.values()))
    run.ledger.confirm()
    if batch.failure is not None:
        raise batch.failure


async def _admit(
    run: Run, caps: Sequence[CapabilityLike], batch: _Batch,
    selected: Mapping[str, ToolDefinition], step: int,
) -> list[Admitted]:
    # Calls are admitted concurrently, so hooks that wait (approvals) wait side by side.
    admitted = await asyncio.gather(
        *(_admit_one(run, caps, batch, selected, step, i, call) for i, call in enumerate(batch.calls))
    )
    ready = [c for c in admitted if c is not None]
    if batch.failure is not None:
        reason = ("another call's identity was changed" if isinstance(batch.failure, ToolCallIdentityChanged)
                  else f"the batch was stopped ({type(batch.failure).__name__})")
        for c in ready:
            batch.record(c.index, "not_executed", f"{reason}: nothing executed")
        return []
    return ready


async def _admit_one(
    run: Run, caps: Sequence[CapabilityLike], batch: _Batch,
    selected: Mapping[str, ToolDefinition], step: int, i: int, call: ToolCallPart,
) -> Admitted | None:
    """Authority, validation and `before_tool_execute` for one call; None if it won't run."""
    tool = run.inventory.tools.get(call.tool_name)
    if tool is None:
        batch.record(i, "denied", f"unknown tool {call.tool_name!r}")
        return None
    if call.tool_name not in selected:
        batch.record(i, "denied", f"tool {call.tool_name!r} is not available in this request")
        return None
    if run.inventory.allowed_tools is not None and call.tool_name not in run.inventory.allowed_tools \
            and HANDOFF_KEY not in tool.metadata:  # a handoff runs nothing (what follows is held)
        batch.record(i, "denied", f"tool {call.tool_name!r} is not authorised for this sub-agent")
        return None
    if call.raw_args is not None:  # the model's argument text was not a JSON object
        batch.record(i, "validation_error", unparsed_args_error(call.raw_args))
        return None
    try:
        args = tool.validate_args(call.args)
    except ValidationError as e:
        batch.record(i, "validation_error", _errors(e))
        return None
    call = call.model_copy(update={"args": args})
    ctx = ToolContext(
        run_id=run.run_id, agent=run.agent.name, run_step=step, tool_name=call.tool_name,
        tool_call_id=call.tool_call_id, retry=run.ledger.counters.tool_retries.get(call.tool_name, 0),
        idempotency_key=f"{run.run_id}/{step}/{call.tool_call_id}", state=copy.deepcopy(run.state),
        context=copy.deepcopy(run.context),  # the run's typed context
    )
    hooked = await _before_hooks(caps, batch, i, ctx, call)
    if hooked is None:
        return None
    try:
        hooked = hooked.model_copy(update={"args": tool.validate_args(hooked.args)})
    except ValidationError as e:
        batch.record(i, "validation_error", _errors(e))
        return None
    size = 0 if tool.in_workflow else oversize(tool_activity_input(tool, hooked.args, ctx),
                                               run.payload_limit)
    if size:  # never started, so not counted in `tool_calls`
        batch.record(i, "not_executed", f"arguments of {size} bytes exceed the "
                     f"{run.payload_limit}-byte payload limit")
        return None
    return Admitted(i, hooked, tool, ctx)


async def _before_hooks(
    caps: Sequence[CapabilityLike], batch: _Batch, i: int, ctx: ToolContext, call: ToolCallPart
) -> ToolCallPart | None:
    original = _identity(call)
    for cap in caps:
        fn = hook_of(cap, "before_tool_execute")
        if fn is None:
            continue
        where = where_of(cap, "before_tool_execute")
        try:  # copies: editing them in place reaches neither the history nor the next hook
            with telemetry.hook_span(where):
                result = await call_hook(cap, where, fn, ctx.model_copy(deep=True),
                                         call.model_copy(deep=True))
        except ToolDenied as e:
            batch.record(i, "denied", e.message)
            return None
        except ToolResponded as e:  # a reviewer's answer is the call's return
            batch.record(i, "succeeded", e.result)
            return None
        except GuardrailTripped as e:  # the run ends; the call is denied, and nothing runs
            batch.record(i, "denied", e.message)
            batch.fail(runtime_failure(e))
            return None
        except Exception as e:
            if is_runtime_failure(e):
                raise  # e.g. the run was cancelled while the hook waited for an approval
            text = e.message if isinstance(e, RunFailure) else str(e)
            batch.record(i, "not_executed", f"{where} raised {raised_name(e)}: {text}")
            if isinstance(e, UserCodeExit):  # SystemExit & co. are no answer for the model
                batch.fail(hook_failure(e, where))
            return None
        if not isinstance(result, ToolCallPart):
            batch.record(i, "not_executed", f"{where} returned {type(result).__name__}, not a ToolCall")
            return None
        try:  # `model_copy(update=...)` skips validation: args may not even be a dict
            result = ToolCallPart.model_validate(result.model_dump(warnings=False))
        except (ValidationError, PydanticSerializationError) as e:
            batch.record(i, "not_executed", f"{where} returned an invalid ToolCall: {e}")
            return None
        if _identity(result) != original:
            batch.record(i, "not_executed", f"{where} changed the call's identity")
            batch.fail(ToolCallIdentityChanged(
                f"{where} changed the identity (id, name, kind or metadata) of call {call.tool_call_id}"
            ))
            return None
        call = result
    return call


async def _execute(run: Run, caps: Sequence[CapabilityLike], batch: _Batch, ready: list[Admitted],
                   client: ClientResults) -> None:
    if not ready:
        return
    run.ledger.bump(tool_calls=run.ledger.counters.tool_calls + len(ready))
    results = await asyncio.gather(*(_run_streamed(run, caps, batch, c, client) for c in ready))
    if any(c.cancelled for c in ready):
        batch.fail(runtime_failure(Cancelled("the run was cancelled while its tools ran")))
    for c, (status, content, usage) in zip(ready, results, strict=True):
        batch.record(c.index, status, content)
        batch.usage[c.index] = usage
        if c.ran == "succeeded" and c.state:  # the tool's own outcome, whatever the model is shown
            _apply_state(run, batch, c)
        if c.failure is not None:
            batch.fail(c.failure)
        elif status == "unknown":
            batch.fail(UncertainToolEffect(
                f"tool {c.tool.name!r} (call {c.call.tool_call_id}) may have taken effect: {content}"
            ))
    for c in ready:
        for cap in caps:
            fn = hook_of(cap, "after_tool_execute")
            if fn is None:
                continue
            where = where_of(cap, "after_tool_execute")
            try:  # copies: the hook observes; the confirmed record stays as it is
                with telemetry.hook_span(where):
                    await call_hook(cap, where, fn, c.ctx.model_copy(deep=True),
                                    c.call.model_copy(deep=True),
                                    batch.returns[c.index].model_copy(deep=True))
            except Exception as e:  # noqa: BLE001 - hook or user code: any error is reported, not raised
                batch.fail(hook_failure(e, where))


async def _run_streamed(
    run: Run, caps: Sequence[CapabilityLike], batch: _Batch, c: Admitted, client: ClientResults,
) -> tuple[ToolReturnStatus, Any, Usage]:
    """Streaming: `_run_one` (and the `before_tool_return` hooks) between its `tool_start` and
    `tool_end` events, which shows what the model is shown."""
    batch.started.add(c.index)
    emit(run.stream, EventType.TOOL_START, step=c.ctx.run_step, call_id=c.call.tool_call_id,
         tool=c.tool.name, args=c.call.args)
    status, content, usage = await run_one(run, c, client)
    c.ran = status
    # guardrails: hooks may replace or withhold what the model sees
    status, content = await before_return(caps, c, status, content, batch.fail)
    _emit_end(run, c.ctx.run_step, ToolReturnPart(tool_name=c.tool.name,
                                                   tool_call_id=c.call.tool_call_id,
                                                   content=content, status=status))
    return status, content, usage


def _emit_end(run: Run, step: int, ret: ToolReturnPart) -> None:
    emit(run.stream, EventType.TOOL_END, **tool_end_fields(step, ret))


def _apply_state(run: Run, batch: _Batch, c: Admitted) -> None:
    """Commit a succeeded call's `ToolResult.state` update (reducer, else last write)."""
    update = dict(c.state or {})
    schema = run.agent.state_schema
    undeclared = sorted(k for k in update if k not in schema)
    if undeclared:  # like a middleware writing an undeclared key: the run fails
        batch.fail(CapabilityViolation(f"tool {c.tool.name!r} wrote state keys no "
                                       f"state_schema declares: {', '.join(undeclared)}"))
        return
    try:
        for key, value in update.items():
            check_jsonable(value, f"tool {c.tool.name!r} wrote state key {key!r}")
        state = apply_reducers(run.state, update, schema, run.agent.capabilities)
        # too large: not committed (the partial run keeps the state before)
        check_state_fits(state, dict.fromkeys(update, f"tool {c.tool.name!r}"), run.payload_limit)
        run.state = state
    except (CapabilityViolation, PayloadTooLarge) as e:  # the call succeeded: its record stays
        batch.fail(e)


def _account(run: Run, batch: _Batch, selected: Mapping[str, ToolDefinition]) -> None:
    """Update consecutive-failure counts and usage in call order; exhausted retries fail."""
    retries = dict(run.ledger.counters.tool_retries)
    for i, ret in sorted(batch.returns.items()):
        if i in batch.usage:
            run.ledger.add_usage(batch.usage[i])
        if ret.status == "succeeded":
            retries.pop(ret.tool_name, None)
        elif ret.status in ("retry", "validation_error", "failed"):
            retries[ret.tool_name] = retries.get(ret.tool_name, 0) + 1
            definition = selected.get(ret.tool_name)
            tool = run.inventory.tools.get(ret.tool_name)
            allowed = definition.max_retries if definition else (tool.max_retries if tool else 0)
            if retries[ret.tool_name] > allowed:
                batch.fail(ToolRetriesExhausted(
                    f"tool {ret.tool_name!r} failed {retries[ret.tool_name]} times in a row "
                    f"(max_retries {allowed})"
                ))
    run.ledger.bump(tool_retries=retries)


def _errors(e: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]} for err in e.errors()
    ]


def unparsed_args_error(raw: str) -> list[dict[str, Any]]:
    """The `validation_error` content of a call whose argument text is not a JSON object."""
    shown = raw if len(raw) <= 200 else raw[:199] + "…"
    return [{"loc": [], "msg": f"the arguments are not a JSON object: {shown}", "type": "json_invalid"}]
