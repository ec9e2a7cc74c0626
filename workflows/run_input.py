"""Decoding `AgentRun`'s input inside the workflow, so bad input fails the run, not its task.

Input comes from anywhere: Python clients, the `temporal` CLI (`--input`,
`--input-file`), the Temporal UI's start form. Whatever arrives, the run ends
with `InvalidRunInput` and a message that says what was wrong: no input, more
than one, bytes that are not UTF-8, a lone surrogate escape, JSON nested too
deep, malformed JSON, an unknown field (with the closest known name), a value
out of range. Resume state is accepted only in an execution Temporal continued.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json
from temporalio import workflow
from temporalio.common import RawValue

from towline.errors import InvalidRunInput
from towline.results import RunInput
from towline.runtime.heap import paused_gc
from towline.runtime.unreadable_payloads import pending, unreadable_reason

__all__ = ["decode_run_input", "decode_argument", "agent_named_in", "describe_errors"]

_EXAMPLE = '{"agent": "calculator", "prompt": "What is 6 times 7?"}'
_REFERENCES = ("json/external-storage-reference",)
"""Encodings of a payload store reference (Temporal's external storage) left unresolved."""
_REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|"
                             rb"(?<![0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def describe_errors(e: ValidationError, known: Sequence[str] = ()) -> str:
    """A ValidationError as one line: `field: problem; ...`, suggesting names for unknown fields."""
    parts: list[str] = []
    for err in e.errors():
        where = ".".join(str(x) for x in err["loc"]) or "input"
        if err["type"] == "extra_forbidden":
            name = str(err["loc"][-1]) if err["loc"] else where
            close = difflib.get_close_matches(name, known, n=1) if len(err["loc"]) == 1 else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            parts.append(f"{where}: unknown field{hint}")
        else:
            parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _raw_problem(raw: RawValue) -> str:
    """Why a payload could not be decoded, in words."""
    payload = raw.payload
    encoding = payload.metadata.get("encoding", b"").decode(errors="replace")
    reason = unreadable_reason(payload)
    if reason is not None:  # a payload store reference this worker can never read
        return f"the input could not be read: {reason}"
    if encoding in _REFERENCES or payload.metadata.get("messageType") == _REFERENCE_TYPE:
        return ("the input is in a payload store, and this worker has none: start the workers "
                "with the clients' store (towline worker --payload-store URL, or "
                "TowlinePlugin(payload_store=...))")
    if encoding not in ("json/plain", ""):
        return f"the input is encoded as {encoding!r}; AgentRun takes JSON ({_EXAMPLE})"
    data = payload.data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return (f"the input is not valid UTF-8 (byte 0x{data[e.start]:02x} at position "
                f"{e.start}); save the input file as UTF-8")
    if _LONE_SURROGATE.search(data):
        return ("the input holds a lone surrogate escape (such as \\ud800), which is not "
                "text; send valid Unicode")
    try:
        from_json(data)
    except ValueError as e:
        text = str(e)
        if "recursion limit" in text:
            return "the input is nested too deeply to be a RunInput"
        return f"the input is not valid JSON ({text}); e.g. {_EXAMPLE}"
    return "the input could not be decoded"


class StoredInputMissing(RuntimeError):
    """The start input's stored payload is missing, for less than the store's `missing_after`:
    not a run failure, the workflow task's (retried until it is there, or final)."""


def decode_run_input(args: Sequence[Any]) -> RunInput:
    """The run's `RunInput` from the workflow's raw arguments; `InvalidRunInput` otherwise."""
    if not args:
        raise InvalidRunInput(f"no input: AgentRun takes one JSON input such as {_EXAMPLE}")
    if len(args) > 1:
        raise InvalidRunInput(f"{len(args)} inputs given: AgentRun takes exactly one, "
                              f"such as {_EXAMPLE}")
    raw = args[0]
    if isinstance(raw, RawValue):
        if pending(raw.payload):  # not in the store yet: fail the task, Temporal retries it
            raise StoredInputMissing(f"the run's input is not in the payload store (yet): "
                                     f"{unreadable_reason(raw.payload)}")
        raise InvalidRunInput(_raw_problem(raw))
    if not isinstance(raw, dict | RunInput):
        raise InvalidRunInput(f"the input is a JSON {type(raw).__name__}, not an object such "
                              f"as {_EXAMPLE}")
    try:
        resumed = isinstance(raw, dict) and "resume" in raw
        with paused_gc() if resumed else contextlib.nullcontext():  # a long run's messages
            inp = RunInput.model_validate(raw)
    except ValidationError as e:
        known = list(RunInput.model_fields)
        raise InvalidRunInput(f"the input is not a valid RunInput: {describe_errors(e, known)}") \
            from None
    except RecursionError:
        raise InvalidRunInput("the input is nested too deeply to be a RunInput") from None
    if inp.resume is not None:
        info = workflow.info()
        if info.continued_run_id is None or info.cron_schedule:
            raise InvalidRunInput(
                "resume is set by the runtime when a run continues as new, never by a client; "
                "to continue a conversation, pass message_history"
            )
    return inp


_M = TypeVar("_M", bound=BaseModel)


def decode_argument(model: type[_M], value: Any, handler: str, example: str, *,
                    accepted: bool = False) -> _M:
    """An update's argument as `model`, or an error saying which field is wrong.

    The updates take their argument untyped and decode it here, in their validator: decoded
    by the SDK, a wrong shape would reach the client as "Failed decoding arguments", naming
    nothing. A validator's error rejects the update (nothing is written to the history) and
    the client reads this message. The handler decodes again with `accepted`: the update was
    accepted (now, or by the code that recorded it, which may have ignored unknown fields),
    so unknown fields are dropped rather than failing a replay.
    """
    if isinstance(value, model):
        return value
    takes = f"the {handler} update takes one {model.__name__} such as {example}"
    if isinstance(value, RawValue):
        raise TypeError(f"{takes}: the argument could not be decoded as JSON")
    if not isinstance(value, dict):
        raise TypeError(f"{takes}, not a JSON {type(value).__name__}")
    fields: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    if accepted:
        fields = {k: v for k, v in fields.items() if k in model.model_fields}
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        raise ValueError(f"{takes}: {describe_errors(e, list(model.model_fields))}") from None


def agent_named_in(args: Sequence[Any]) -> str | None:
    """The agent name an (invalid) input gives, if any, for the run's search attributes."""
    first: Any = args[0] if len(args) == 1 else None
    if isinstance(first, dict):
        value: Any = first.get("agent")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(value, str) and 0 < len(value) <= 200:
            return value
    return None
