"""A call's return given from outside (a reviewer's `respond`, a client tool's result), checked
against the tool's output type before the run takes it."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError

from towline.tools import Tool

__all__ = ["check_result", "output_adapter"]


def output_adapter(tool: Tool) -> TypeAdapter[Any] | None:
    """A validator of `tool`'s return (its function's return annotation), None if it has none
    (built once per tool)."""
    if "_output_adapter" not in tool.__dict__:
        object.__setattr__(tool, "_output_adapter", _adapter(tool))
    found: TypeAdapter[Any] | None = tool.__dict__["_output_adapter"]
    return found


def _adapter(tool: Tool) -> TypeAdapter[Any] | None:
    try:
        hint = typing.get_type_hints(tool.function).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve checks nothing
        return None
    if hint is None or hint is Any or hint is type(None):
        return None
    try:
        return TypeAdapter(hint)
    except Exception:  # noqa: BLE001 - a type pydantic cannot validate checks nothing
        return None


def check_result(tool: Tool, result: Any, call_id: str) -> None:
    """ValueError naming what is wrong when `result` is not a valid return of `tool`."""
    validate: Any = getattr(tool, "validate_output", None)
    if callable(validate):  # a client tool with an output schema
        problem = validate(result)
        if problem:
            raise ValueError(f"the result for {call_id!r} is not what {tool.name!r} returns: {problem}")
        return
    adapter = output_adapter(tool)
    if adapter is None:
        return
    try:
        adapter.validate_python(result, strict=False)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"the result for {call_id!r} is not what {tool.name!r} returns "
                         f"({adapter.json_schema().get('type', 'its type')}): "
                         f"{where + ': ' if where else ''}{first['msg']}") from None
