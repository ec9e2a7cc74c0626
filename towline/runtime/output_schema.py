"""Output schemas in the strict form that providers' native structured output requires.

OpenAI's `json_schema` response format (strict), the Responses API's
`text.format`, Anthropic's structured outputs and Gemini's response schema
take an object schema whose every object is closed and lists all its
properties as required. A pydantic model's schema has optional fields (with
defaults): `strict_schema` makes each such property required but nullable,
and `unstrict` turns the model's `null` for it back into "not given", so the
output type's own default applies. Pure functions: the workflow uses them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

__all__ = ["strict_schema", "unstrict"]


def _nullable(node: Mapping[str, Any]) -> bool:
    options: list[Any] = node.get("anyOf") or node.get("oneOf") or []
    return node.get("type") == "null" or any(
        isinstance(o, Mapping) and cast(Mapping[str, Any], o).get("type") == "null"
        for o in options
    )


def _defs(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    return cast(Mapping[str, Any], schema.get("$defs") or {})


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with every object closed (`additionalProperties: false`), all its properties
    required (an optional one that did not allow null now does) and no `default`s."""

    def walk(node: Any, optional: bool = False) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in cast(list[Any], node)]
        if not isinstance(node, Mapping):
            return node
        source = cast(Mapping[str, Any], node)
        out: dict[str, Any] = {k: walk(v) for k, v in source.items()
                               if k not in ("default", "properties")}
        if source.get("type") == "object" or "properties" in source:
            props = cast(Mapping[str, Any], source.get("properties") or {})
            required = set(cast(list[str], source.get("required") or []))
            out["properties"] = {k: walk(v, k not in required) for k, v in props.items()}
            out["required"] = list(props)
            out["additionalProperties"] = False
        if optional and not _nullable(source):
            return {"anyOf": [out, {"type": "null"}]}
        return out

    result: dict[str, Any] = walk(schema)
    return result


def unstrict(value: Any, schema: Mapping[str, Any]) -> Any:
    """`value` (a model's answer to `strict_schema(schema)`) with each `null` that stands for
    an optional property left out (`schema` did not allow null there), so that its default
    applies when the output type validates it."""
    defs = _defs(schema)

    def walk(v: Any, node: Mapping[str, Any]) -> Any:
        ref = node.get("$ref")
        if isinstance(ref, str):
            node = cast(Mapping[str, Any], defs.get(ref.rsplit("/", 1)[-1]) or {})
        if isinstance(v, dict) and ("properties" in node or node.get("type") == "object"):
            props = cast(Mapping[str, Any], node.get("properties") or {})
            required = set(cast(list[str], node.get("required") or []))
            out: dict[str, Any] = {}
            for key, item in cast(dict[str, Any], v).items():  # pyright: ignore[reportUnknownVariableType]
                sub = cast(Mapping[str, Any], props.get(key) or {})
                if item is None and key not in required and not _nullable(sub):
                    continue
                out[key] = walk(item, sub)
            return out
        if isinstance(v, list):
            items = cast(Mapping[str, Any], node.get("items") or {})
            return [walk(i, items) for i in cast(list[Any], v)]
        return cast(Any, v)

    result: Any = walk(value, schema)
    return result
