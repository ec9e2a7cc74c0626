"""A run's final output: text, or structured output validated against `output_type`.

Invalid output is answered with a retry record (a `validation_error` return for
an output-tool call, a `RetryPart` otherwise) and consumes one of the run's
`output_retries`; past them the run fails with `OutputRetriesExhausted`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from towline.agent import OUTPUT_TOOL_NAME
from towline.errors import OutputRetriesExhausted
from towline.messages import ModelRequest, ModelResponse, RetryPart, ToolReturnPart
from towline.tools import ToolCall

from .guard import Guard, guarded_sync
from .run import Run

__all__ = ["CONTINUE", "structured_output", "text_output", "output_retry", "jumped_output"]

CONTINUE: Any = object()
"""Returned instead of an output when the run goes on to another turn."""


def _validated(run: Run, validate: Callable[[Any], Any], value: Any) -> Any:
    """`validate(value)`, under the determinism guard when the output type is user code
    (its validators run as workflow code)."""
    output_type = run.agent.output_type
    if not str(getattr(output_type, "__module__", "")).startswith(("towline.", "builtins")):
        name = getattr(output_type, "__name__", "output_type")
        return guarded_sync(Guard(f"{name} validation", capability=name, hook="validation"),
                            validate, value)
    return validate(value)


def structured_output(run: Run, call: ToolCall) -> Any:
    """Validate the output-tool call; its JSON value, or `CONTINUE` after a retry record."""
    adapter = run.agent.output_adapter
    assert adapter is not None
    if call.raw_args is not None:
        output_retry(run, f"invalid output: the arguments are not a JSON object: {call.raw_args[:200]}", call)
        return CONTINUE
    try:
        args = call.args["response"] if run.agent.output_wrapped else call.args
        value = _validated(run, adapter.validate_python, args)
    except (ValidationError, KeyError) as e:
        output_retry(run, f"invalid output: {e}", call)
        return CONTINUE
    run.record_returns([ToolReturnPart(
        tool_name=call.tool_name, tool_call_id=call.tool_call_id,
        content="final result accepted", status="succeeded")])
    run.close_unpaired("not executed: the final result ended the run")
    return adapter.dump_python(value, mode="json")


def text_output(run: Run, response: ModelResponse) -> Any:
    """The text answer (or JSON text validated against `output_type`), or `CONTINUE`."""
    adapter = run.agent.output_adapter
    text = response.text
    if adapter is None:
        if text:
            return text
        output_retry(run, "the response was empty; answer with text")
        return CONTINUE
    try:
        value = _validated(run, adapter.validate_json, text)
    except ValidationError as e:
        output_retry(run, f"call {OUTPUT_TOOL_NAME} with the final answer ({e.error_count()} errors)")
        return CONTINUE
    return adapter.dump_python(value, mode="json")


def output_retry(run: Run, message: str, call: ToolCall | None = None) -> None:
    """Record an invalid output and consume one output retry (failing past the limit)."""
    used = run.counters.output_retries_used + 1
    run.bump(output_retries_used=used)
    if call is not None:
        run.record_returns([ToolReturnPart(
            tool_name=call.tool_name, tool_call_id=call.tool_call_id, content=message,
            status="validation_error")])
        run.close_unpaired("not executed: the output was invalid")
    else:
        run.append(ModelRequest(parts=[RetryPart(content=message)]))
    run.confirm()
    if used > run.limits.output_retries:
        raise OutputRetriesExhausted(
            f"output invalid {used} times (output_retries {run.limits.output_retries}): {message}"
        )


def jumped_output(run: Run, response: ModelResponse) -> Any:
    """The output of a run a hook ended by a jump: never a retry, never a failure.

    Text for a text agent (None if there is none). For an `output_type` agent the
    response's text is validated as JSON; when it is not valid output, the run ends
    with None rather than with a value of the wrong shape.
    """
    adapter = run.agent.output_adapter
    if adapter is None:
        return response.text or None
    try:
        return adapter.dump_python(_validated(run, adapter.validate_json, response.text),
                                   mode="json")
    except ValidationError:
        return None
