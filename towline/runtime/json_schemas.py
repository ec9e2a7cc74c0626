"""JSON schemas checked in the workflow (pure computation with jsonschema): the arguments of an
MCP server's listed tools, and a client tool's arguments and result
(`towline.tools.SchemaClientTool`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["compiled", "compiled_schema", "schema_errors", "AnyArgs"]


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
