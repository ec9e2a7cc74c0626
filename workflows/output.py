"""A run's final output: text, or structured output validated against `output_type`.

Structured output comes as the output tool's arguments (`output_mode="tool"`) or as
the response's text: JSON that matches the schema the provider was given
(`"native"`), or JSON the model was asked for in its instructions (`"prompted"`,
code fences and prose around it allowed). Invalid output is answered with a retry
record (a `validation_error` return for an output-tool call, a `RetryPart`
otherwise) and consumes one of the run's `output_retries`; past them the run fails
with `OutputRetriesExhausted`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, cast

from pydantic import ValidationError

from towline.agent import OUTPUT_TOOL_NAME, Agent
from towline.errors import OutputRetriesExhausted
from towline.events import EventType, preview
from towline.messages import ModelRequest, ModelResponse, RetryPart, ToolReturnPart
from towline.runtime.output_schema import unstrict
from towline.tools import ToolCall

from .events import emit
from .guard import Guard, guarded_sync
from .run import Run

__all__ = [
    "CONTINUE", "NO_OUTPUT", "final_output", "structured_output", "text_output", "output_retry", "jumped_output",
    "output_instructions", "PROMPTED_OUTPUT",
]

CONTINUE: Any = object()
"""Returned instead of an output when the run goes on to another turn."""

PROMPTED_OUTPUT = (
    "Answer with one JSON object that matches the JSON schema below, and nothing else: "
    "no prose before or after it.\n\nJSON schema:\n{schema}"
)
"""The instructions `output_mode="prompted"` adds after the agent's (`{schema}`: the output's
JSON schema)."""

_FENCED = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)```", re.DOTALL)
_ERRORS_SHOWN = 2000
"""Characters of a validation error the model is shown in a retry."""


def output_instructions(agent: Agent) -> str | None:
    """The system text `output_mode="prompted"` adds after the agent's instructions (None in
    the other modes): the output's JSON schema and how to answer. Deterministic."""
    schema = agent.output_schema() if agent.output_mode == "prompted" else None
    if schema is None:
        return None
    return PROMPTED_OUTPUT.format(schema=json.dumps(schema, separators=(",", ":")))


class _Invalid(Exception):
    """Output text that is not the output: why, in words for the model."""


def _validated(agent: Agent, validate: Callable[[Any], Any], value: Any) -> Any:
    """`validate(value)`, under the determinism guard when the output type is user code
    (its validators run as workflow code)."""
    output_type = agent.output_type
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
        value = _validated(run.agent, adapter.validate_python, args)
    except (ValidationError, KeyError) as e:
        output_retry(run, f"invalid output: {e}", call)
        return CONTINUE
    run.conversation.record_returns([ToolReturnPart(
        tool_name=call.tool_name, tool_call_id=call.tool_call_id,
        content="final result accepted", status="succeeded")])
    run.conversation.close_unpaired("not executed: the final result ended the run")
    return adapter.dump_python(value, mode="json")


def text_output(run: Run, response: ModelResponse) -> Any:
    """The text answer (or JSON text validated against `output_type`), or `CONTINUE`.

    A response without text (only thinking, say) is empty: it is retried like any
    invalid output."""
    agent = run.agent
    adapter = agent.output_adapter
    text = response.text
    if adapter is None:
        if text:
            return text
        output_retry(run, "the response was empty; answer with text")
        return CONTINUE
    if agent.output_mode == "tool":
        try:
            value = _validated(run.agent, adapter.validate_json, text)
        except ValidationError as e:
            output_retry(run, f"call {OUTPUT_TOOL_NAME} with the final answer ({e.error_count()} errors)")
            return CONTINUE
        return adapter.dump_python(value, mode="json")
    try:
        return _text_value(run.agent, text)
    except _Invalid as e:
        output_retry(run, f"invalid output: {e}. Answer again with only one JSON object that "
                          "matches the schema.")
        return CONTINUE


def _json_text(text: str, prompted: bool) -> str:
    """The JSON in an answer: all of it, or (prompted) its fenced block or outermost object."""
    if not prompted:
        return text
    fenced = _FENCED.search(text)
    if fenced is not None:
        return fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if 0 <= start < end else text


def _text_value(agent: Agent, text: str) -> Any:
    """The output (as JSON) of a native or prompted answer; `_Invalid` says what is wrong."""
    adapter = agent.output_adapter
    assert adapter is not None
    if not text.strip():
        raise _Invalid("the response was empty")
    try:
        value: Any = json.loads(_json_text(text, agent.output_mode == "prompted"))
    except ValueError as e:
        raise _Invalid(f"the answer is not valid JSON ({e})") from None
    except RecursionError:
        raise _Invalid("the answer is nested too deeply") from None
    if agent.output_mode == "native":  # a null for an optional field means "not given"
        schema = agent.output_schema()
        assert schema is not None
        value = unstrict(value, schema)
    if agent.output_wrapped:
        wrapped: Any = value
        if not isinstance(wrapped, dict) or "response" not in wrapped:
            raise _Invalid('the answer is not an object with a "response" key')
        value = cast(dict[str, Any], wrapped)["response"]
    try:  # as JSON, as the answer came (a strict output type parses JSON text its own way)
        validated = _validated(agent, adapter.validate_json, json.dumps(value))
    except ValidationError as e:
        raise _Invalid(str(e)[:_ERRORS_SHOWN]) from None
    return adapter.dump_python(validated, mode="json")


NO_OUTPUT: Any = object()
"""`final_output`'s answer for a response that gives no valid final output."""


def final_output(agent: Agent, response: ModelResponse) -> Any:
    """The output `response` gives as `agent`'s final answer, as `RunResult.output` would hold
    it (text, or the validated output as JSON), or `NO_OUTPUT`: the response calls tools, or
    its output is not valid (the run will ask again). Records nothing (an `OutputGuardrail`
    reads it in `after_model`)."""
    calls = response.tool_calls
    adapter = agent.output_adapter
    if calls and (adapter is None or any(c.tool_name != OUTPUT_TOOL_NAME for c in calls)):
        return NO_OUTPUT
    try:
        if calls and adapter is not None:
            call = calls[0]
            if call.raw_args is not None:
                return NO_OUTPUT
            args = call.args["response"] if agent.output_wrapped else call.args
            return adapter.dump_python(_validated(agent, adapter.validate_python, args), mode="json")
        if adapter is None:
            return response.text or NO_OUTPUT
        if agent.output_mode == "tool":
            return adapter.dump_python(_validated(agent, adapter.validate_json, response.text),
                                       mode="json")
        return _text_value(agent, response.text)
    except (ValidationError, KeyError, _Invalid):
        return NO_OUTPUT


def output_retry(run: Run, message: str, call: ToolCall | None = None) -> None:
    """Record an invalid output and consume one output retry (failing past the limit)."""
    used = run.ledger.counters.output_retries_used + 1
    run.ledger.bump(output_retries_used=used)
    if call is not None:
        run.conversation.record_returns([ToolReturnPart(
            tool_name=call.tool_name, tool_call_id=call.tool_call_id, content=message,
            status="validation_error")])
        run.conversation.close_unpaired("not executed: the output was invalid")
    else:
        run.conversation.append(ModelRequest(parts=[RetryPart(content=message)]))
    run.ledger.confirm()
    emit(run.stream, EventType.OUTPUT_RETRY, step=run.ledger.counters.run_step, message=preview(message))
    if used > run.limits.output_retries:
        raise OutputRetriesExhausted(
            f"output invalid {used} times (output_retries {run.limits.output_retries}): {message}"
        )


def jumped_output(run: Run, response: ModelResponse) -> Any:
    """The output of a run a hook ended by a jump: never a retry, never a failure.

    Text for a text agent (None if there is none). For an `output_type` agent the
    response's text is validated as JSON (read as its output mode reads it); when it
    is not valid output, the run ends with None rather than with a value of the wrong
    shape.
    """
    adapter = run.agent.output_adapter
    if adapter is None:
        return response.text or None
    if run.agent.output_mode != "tool":
        try:
            return _text_value(run.agent, response.text)
        except _Invalid:
            return None
    try:
        return adapter.dump_python(_validated(run.agent, adapter.validate_json, response.text),
                                   mode="json")
    except ValidationError:
        return None
