"""`before_tool_return`: the hooks that see a tool's return before it is recorded.

Between a tool's execution and its return record, each capability's `before_tool_return`
may hand back the return unchanged, with other `content` (a redaction, a replacement), or
with status `denied` (the output withheld). A guardrail (`ToolGuardrail`,
`PromptInjectionGuard`) is the usual one. The call's identity is immutable and no other
status may be set: the tool's own outcome decides its retries and its state update. A hook
that raises, or returns anything else, fails the run (`CapabilityViolation`) and the
tool's confirmed return is recorded as it came, like an `after_tool_execute` failure; a
`GuardrailTripped` fails it too, and the return is recorded `denied`, withheld.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from towline.capabilities.base import CapabilityLike, hook_of
from towline.errors import CapabilityViolation, GuardrailTripped, RunFailure
from towline.messages import ToolReturnPart, ToolReturnStatus
from towline.telemetry import tracing as telemetry

from .hooks import call_hook, check_jsonable, hook_failure, where_of
from .tool_call import Admitted

__all__ = ["before_return"]


async def before_return(
    caps: Sequence[CapabilityLike], c: Admitted, status: ToolReturnStatus, content: Any,
    fail: Callable[[RunFailure], None],
) -> tuple[ToolReturnStatus, Any]:
    """The status and content the model is shown of call `c`, after every hook (in list order)."""
    ret = ToolReturnPart(tool_name=c.tool.name, tool_call_id=c.call.tool_call_id,
                         content=content, status=status)
    for cap in caps:
        fn = hook_of(cap, "before_tool_return")
        if fn is None:
            continue
        where = where_of(cap, "before_tool_return")
        try:  # copies: only what the hook returns counts
            with telemetry.hook_span(where):
                result = await call_hook(cap, where, fn, c.ctx.model_copy(deep=True),
                                         c.call.model_copy(deep=True), ret.model_copy(deep=True))
        except Exception as e:  # noqa: BLE001 - hook or user code: reported, never raised here
            failure = hook_failure(e, where)
            fail(failure)
            if isinstance(failure, GuardrailTripped):
                return "denied", f"withheld: {failure.message}"
            return ret.status, ret.content
        try:
            ret = _checked(result, ret, where)
        except CapabilityViolation as e:
            fail(e)
            return ret.status, ret.content
    return ret.status, ret.content


def _checked(result: Any, before: ToolReturnPart, where: str) -> ToolReturnPart:
    """A fresh, valid copy of what a hook returned, or `CapabilityViolation`."""
    if not isinstance(result, ToolReturnPart):
        raise CapabilityViolation(f"{where} returned {type(result).__name__}, not a ToolReturn")
    try:  # `model_copy(update=...)` skips validation: content may not even be JSON
        fresh = ToolReturnPart.model_validate(result.model_dump(warnings=False))
    except (ValidationError, PydanticSerializationError) as e:
        raise CapabilityViolation(f"{where} returned an invalid ToolReturn: {e}") from None
    check_jsonable(fresh.content, f"{where} returned content")
    if (fresh.tool_name, fresh.tool_call_id) != (before.tool_name, before.tool_call_id):
        raise CapabilityViolation(f"{where} changed the identity (tool name or call id) of "
                                  f"call {before.tool_call_id}")
    if fresh.status not in (before.status, "denied"):
        raise CapabilityViolation(f"{where} set status {fresh.status!r} on call "
                                  f"{before.tool_call_id}: only 'denied' (withheld) may replace "
                                  f"{before.status!r}")
    return fresh
