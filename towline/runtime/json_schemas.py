"""JSON schemas checked in the workflow (pure computation with jsonschema): the arguments of an
MCP server's listed tools, and a client tool's arguments and result (`SchemaClientTool`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from towline.errors import ConfigurationError
from towline.tools import Tool

__all__ = ["compiled", "compiled_schema", "schema_errors", "AnyArgs", "SchemaClientTool"]


@lru_cache(maxsize=4096)
def compiled(schema_json: str) -> Any:
    """A checked validator per distinct schema, shared (listing every turn stays cheap)."""
    from jsonschema import exceptions, validators  # workflow-safe: pure computation

    schema = json.loads(schema_json)
    cls: Any = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as e:
        raise ValueError(e.message) from None
    return cls(schema)


def compiled_schema(schema: Mapping[str, Any]) -> Any:
    """A checked jsonschema validator of `schema` (ValueError if it is not a schema)."""
    return compiled(json.dumps(dict(schema), sort_keys=True))


def schema_errors(validator: Any, value: Any, title: str) -> ValidationError | None:
    errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
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


class AnyArgs(BaseModel):
    """Arguments checked by a JSON schema, not by a model: any fields pass the model."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class SchemaClientTool(Tool):
    """A client tool defined by JSON schemas (`Tool.client`, or an AG-UI client's `tools`): its
    arguments and its result are checked against them in the workflow."""

    input_schema: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """The JSON schema of the arguments."""
    result_schema: Mapping[str, Any] | None = None
    """The JSON schema a result must match (None: any JSON)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "args_model", AnyArgs)
        super().__post_init__()
        try:
            compiled_schema(self.input_schema)
            if self.result_schema is not None:
                compiled_schema(self.result_schema)
        except ValueError as e:
            raise ConfigurationError(f"client tool {self.name!r}: invalid schema: {e}") from None

    @property
    def json_schema(self) -> dict[str, Any]:
        """The arguments' JSON schema."""
        return dict(self.input_schema)

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate against the schema; raises `pydantic.ValidationError` like any tool."""
        value = copy.deepcopy(dict(args))
        error = schema_errors(compiled_schema(self.input_schema), value, self.name)
        if error is not None:
            raise error
        return value

    def validate_output(self, result: Any) -> str | None:
        """What is wrong with `result` against `result_schema` (None: nothing)."""
        if self.result_schema is None:
            return None
        error = schema_errors(compiled_schema(self.result_schema), result, self.name)
        return None if error is None else "; ".join(e["msg"] for e in error.errors())
