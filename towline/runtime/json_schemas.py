"""JSON schemas checked in the workflow (pure computation with jsonschema): the arguments of an
MCP server's listed tools, and a client tool's arguments and result
(`towline.tools.SchemaClientTool`). The one home of the workflow's schema validators.

These schemas come from outside (a web client's `tools`, a raw client's `client_tools`, an MCP
server's listing), and they run on the worker, inside workflow code. So a schema is
refused (ValueError, before any value is checked against it) when it

- refers outside itself: a `$ref` (`$dynamicRef`, `$recursiveRef`) not starting with `#`.
  A reference is followed only within the document; the validator's registry refuses to
  retrieve anything (`file://` would read a worker's file, `http://` fetch any URL);
- has a `pattern` or `patternProperties` key RE2 cannot compile. Patterns run on RE2, whose
  time is linear in the text (Python's `re` backtracks: `^(a+)+$` freezes the worker on 35
  characters). RE2 has no backreferences or lookaround;
- combines `unevaluatedProperties` with `patternProperties` (jsonschema matches those
  patterns with Python's `re`);
- is larger than `MAX_SCHEMA_CHARS` or nested deeper than `MAX_SCHEMA_DEPTH`.

Checking a value spends at most `MAX_STEPS` keyword applications, plus `STEPS_PER_VALUE` for
each JSON value in it (a count, not a clock: deterministic; linear in the value, where a
backtracking schema is exponential; well inside the 2-second deadlock detector); anything that goes wrong while checking (the budget spent, a value nested too
deeply, an unresolvable reference) is a validation error of that value, in words of ours,
never an exception that would fail the workflow task, nor a library's raw text.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["compiled", "compiled_schema", "schema_errors", "checked_args", "AnyArgs", "MAX_SCHEMA_CHARS",
           "MAX_SCHEMA_DEPTH", "MAX_STEPS", "STEPS_PER_VALUE"]

MAX_SCHEMA_CHARS = 256 * 1024
"""The largest schema taken, as JSON text."""
MAX_SCHEMA_DEPTH = 64
"""The deepest nesting of objects and arrays a schema may have."""
MAX_STEPS = 20_000
"""The keyword applications one value's check may spend, beside `STEPS_PER_VALUE` (a few
milliseconds' work; a tool's arguments take tens to hundreds)."""
STEPS_PER_VALUE = 20
"""What each JSON value (object, array, or scalar) inside the checked value adds to the budget."""

_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


@lru_cache(maxsize=4096)
def compiled(schema_json: str) -> Any:
    """A checked validator per distinct schema, shared (listing every turn stays cheap);
    ValueError, saying why, for a schema that is not one or is refused (the module's docstring)."""
    from jsonschema import exceptions, validators  # workflow-safe: pure computation

    if len(schema_json) > MAX_SCHEMA_CHARS:
        raise ValueError(f"the schema is larger than {MAX_SCHEMA_CHARS} characters")
    try:
        schema = json.loads(schema_json)
    except (ValueError, RecursionError):
        raise ValueError("the schema is not JSON") from None
    _check_depth(schema)
    cls: Any = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:  # formats unchecked: `format: regex` would compile each pattern with Python's `re`
        cls.check_schema(schema, format_checker=None)
    except exceptions.SchemaError as e:
        raise ValueError(e.message) from None
    except Exception:  # noqa: BLE001 - a library's raw text says nothing useful to a client
        raise ValueError("the schema could not be read as a JSON schema") from None
    _check_contents(schema, cls)
    return _bounded(cls)(schema, registry=_no_retrieval())


def compiled_schema(schema: Mapping[str, Any]) -> Any:
    """A checked jsonschema validator of `schema` (ValueError if it is not a schema, or is
    refused)."""
    _check_depth(schema)
    try:
        text = json.dumps(dict(schema), sort_keys=True)
    except (TypeError, ValueError):
        raise ValueError("the schema is not JSON") from None
    return compiled(text)


def checked_args(validator: Any, args: Mapping[str, Any], title: str) -> dict[str, Any]:
    """A copy of a tool's `args`, checked by `validator`; raises `pydantic.ValidationError`
    like any tool."""
    value = copy.deepcopy(dict(args))
    error = schema_errors(validator, value, title)
    if error is not None:
        raise error
    return value


def schema_errors(validator: Any, value: Any, title: str) -> ValidationError | None:
    """What is wrong with `value` against `validator` (None: nothing), as a pydantic error
    titled `title`. Never raises: a check that cannot finish is an error of the value."""
    token = _BUDGET.set(_Budget(MAX_STEPS + STEPS_PER_VALUE * _values_in(value)))
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    except Exception as e:  # noqa: BLE001 - any failure to check is the value's error, in our words
        return _one_error(title, _unchecked(e), value)
    finally:
        _BUDGET.reset(token)
    if not errors:
        return None
    details = [
        InitErrorDetails(
            type=PydanticCustomError("json_schema", "{message}", {"message": e.message}),
            loc=tuple(p if isinstance(p, int) else str(p) for p in e.absolute_path),
            input=e.instance,
        ) for e in errors
    ]
    return ValidationError.from_exception_data(title, details)


def _one_error(title: str, message: str, value: Any) -> ValidationError:
    details = [InitErrorDetails(type=PydanticCustomError("json_schema", "{message}",
                                                         {"message": message}),
                                loc=(), input=value)]
    return ValidationError.from_exception_data(title, details)


def _unchecked(e: Exception) -> str:
    """Why a value could not be checked, in words of ours (no library or file text)."""
    from referencing.exceptions import Unresolvable

    if isinstance(e, _OverBudget):
        return ("checking the value against the schema took too many steps: the schema is "
                "too complex for this value")
    if isinstance(e, RecursionError):
        return "the value is nested too deeply to check against the schema"
    if isinstance(e, Unresolvable):
        return "a reference in the schema could not be resolved within the schema"
    return f"the value could not be checked against the schema ({type(e).__name__})"


def _values_in(value: Any) -> int:
    """How many JSON values `value` holds, itself included (iterative)."""
    count = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, Mapping):
            stack.extend(cast(Mapping[Any, Any], node).values())
        elif isinstance(node, list | tuple):
            stack.extend(cast(list[Any], node))
    return count


def _check_depth(schema: Any) -> None:
    """ValueError past `MAX_SCHEMA_DEPTH` (iterative: a deep schema must not recurse)."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        children: Any = (cast(Mapping[Any, Any], node).values() if isinstance(node, Mapping) else
                         cast(list[Any], node) if isinstance(node, list | tuple) else None)
        if children is None:
            continue
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        stack.extend((c, depth + 1) for c in children)


def _check_contents(schema: Any, cls: Any) -> None:
    """ValueError for a reference outside the schema, a pattern RE2 cannot run, or
    `unevaluatedProperties` with `patternProperties`; each schema position visited once, as
    the schema's dialect lays them out (a `$ref` inside an `enum` value is data, not one)."""
    from referencing.jsonschema import DRAFT202012, specification_with

    spec: Any = specification_with(str(cls.META_SCHEMA.get("$schema", "")), default=DRAFT202012)
    seen: set[str] = set()
    stack: list[Any] = [schema]
    while stack:
        popped = stack.pop()
        if not isinstance(popped, Mapping):
            continue
        node = cast(Mapping[str, Any], popped)
        for keyword in _REF_KEYWORDS:
            ref = node.get(keyword)
            if isinstance(ref, str) and not ref.startswith("#"):
                raise ValueError(f"{keyword} {ref!r} refers outside the schema: only references "
                                 "within it (starting with '#') are followed")
        if isinstance(pattern := node.get("pattern"), str):
            _regex(pattern)
        if isinstance(patterns := node.get("patternProperties"), Mapping):
            for key in cast(Mapping[Any, Any], patterns):
                _regex(str(key))
        seen.update(k for k in ("patternProperties", "unevaluatedProperties") if k in node)
        stack.extend(spec.subresources_of(node))
    if len(seen) == 2:
        raise ValueError("unevaluatedProperties together with patternProperties is not "
                         "supported in a schema from outside")


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by RE2 (linear time); ValueError if RE2 cannot run it."""
    import re2 as module  # pyright: ignore[reportMissingTypeStubs]

    re2: Any = module
    options: Any = re2.Options()
    options.log_errors = False  # refused here, in words of ours, not on the worker's stderr
    try:
        return re2.compile(pattern, options)
    except re2.error:
        raise ValueError(f"the pattern {pattern!r} is not supported: patterns run on RE2, "
                         "which has no backreferences or lookaround") from None


@lru_cache(maxsize=1)
def _no_retrieval() -> Any:
    """A registry that retrieves nothing: `referencing`'s own default (its `retrieve` raises
    `NoSuchResource`), passed so that jsonschema does not fall back to its deprecated resolver,
    which fetches any URL (jsonschema adds its bundled meta-schemas)."""
    from referencing import Registry

    return Registry()  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]


class _OverBudget(Exception):
    """A value's check spent `MAX_STEPS`."""


class _Budget:
    """The keyword applications one check has left (one per `schema_errors` call)."""

    def __init__(self, steps: int) -> None:
        self.left = steps


_BUDGET: ContextVar[_Budget | None] = ContextVar("towline_schema_budget", default=None)


def _spend() -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.left -= 1
        if budget.left < 0:
            raise _OverBudget


@lru_cache(maxsize=16)
def _bounded(cls: Any) -> Any:
    """`cls` whose every keyword spends the budget, its pattern keywords on RE2."""
    from jsonschema import validators as module

    validators: Any = module
    keywords = {**cls.VALIDATORS, **{k: f for k, f in _RE2_KEYWORDS.items() if k in cls.VALIDATORS}}
    return validators.extend(cls, {k: _counted(f) for k, f in keywords.items()})


def _counted(fn: Any) -> Any:
    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend()
        return fn(validator, value, instance, schema)

    return keyword


def _shown(text: str) -> str:
    """`text` as an error quotes it: its first 200 characters (the whole is the call's)."""
    return text if len(text) <= 200 else text[:200] + "…"


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError as SchemaValidationError

    if validator.is_type(instance, "string") and not _regex(patrn).search(instance):
        yield SchemaValidationError(f"{_shown(instance)!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if _regex(pattern).search(k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator: Any, ap: Any, instance: Any,
                           schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError as SchemaValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [_regex(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in properties and not any(p.search(k) for p in patterns)]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        names = ", ".join(repr(_shown(str(e))) for e in sorted(extras, key=str))
        if "patternProperties" in schema:
            joined = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield SchemaValidationError(f"{names} {'does' if len(extras) == 1 else 'do'} not "
                                        f"match any of the regexes: {joined}")
        else:
            yield SchemaValidationError(f"Additional properties are not allowed ({names} "
                                        f"{'was' if len(extras) == 1 else 'were'} unexpected)")


_RE2_KEYWORDS: dict[str, Any] = {"pattern": _pattern, "patternProperties": _pattern_properties,
                                 "additionalProperties": _additional_properties}
"""jsonschema's keywords that match with Python's `re`, on RE2 instead."""


class AnyArgs(BaseModel):
    """Arguments checked by a JSON schema, not by a model: any fields pass the model."""

    model_config = ConfigDict(extra="allow")
