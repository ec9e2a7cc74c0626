"""Agent versions: a fingerprint of an agent's definition.

`agent_version(agent)` is 12 hex digits of a SHA-256 over a canonical JSON
description of what decides the commands a run emits: the agent's name, its model,
its output type (and its output mode, unless `"tool"`), every tool of its inventory
(name, description, argument schema, kind, retries, whether it runs in the workflow
or is idempotent, metadata), its
capabilities in order with their configuration (class, then fields; functions and
classes by qualified name, sub-agents by their own version), its limits, and its MCP
servers (their names, prefixes, tool filters and retry settings, and when they are listed), its
native tools, and whether its model calls run in the background (they are polled). Two
processes with the same definition compute the same version (nothing here depends
on `PYTHONHASHSEED`, memory addresses or the clock); changing any of those parts
changes it.

Not part of it: the instructions' text (whether they are a function, which runs as an
activity, is), model settings and timeouts (they change what a
request says or how long it may take, not which commands a run emits), and the
code of functions (a hook's body): a change there that alters commands needs
`workflow.patched`, and `towline replay` is how to check.

The version is recorded when a run starts (the ledger memo and the
`TowlineAgentVersion` search attribute, and a `workflow.patched` marker that a
worker checks when it replays the run). The description is a persisted format:
change it and every run in flight looks like another version.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter

from towline.capabilities.base import ADDED_OPTION
from towline.tools import Tool

if TYPE_CHECKING:
    from towline.agent import Agent
    from towline.capabilities.base import CapabilityLike

__all__ = [
    "agent_version", "describe_agent", "describe_capability", "is_frozen", "VERSION_LENGTH",
    "ADDED_OPTION",
]

VERSION_LENGTH = 12
"""Hex digits of an agent version."""

_MCP_FIELDS = ("name", "prefix", "tools", "idempotent", "trust_hints", "max_retries", "required")
"""What of an `MCPServer` decides a run's commands (its command, URL, environment, headers
and timeouts say where and how to reach it: deployment settings, not the definition)."""

_DEPTH = 12
"""How deep configuration is described (deeper values are named by type only)."""


def agent_version(agent: Agent) -> str:
    """The agent's version: a fingerprint of its definition (see the module doc)."""
    text = json.dumps(describe_agent(agent), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:VERSION_LENGTH]


def describe_agent(agent: Agent) -> dict[str, Any]:
    """The canonical description the version is computed from (JSON-ready)."""
    described: dict[str, Any] = {
        "name": agent.name,
        "model": agent.model_name,
        "output_type": _output_type(agent.output_type),
        "tools": [_tool(t) for t in agent.inventory.values()],
        "capabilities": [describe_capability(c) for c in agent.capabilities],
        "limits": agent.limits.model_dump(mode="json"),
    }
    if agent.output_mode != "tool":  # only then: agents from before output modes keep their version
        described["output_mode"] = agent.output_mode
    if callable(agent.instructions):  # only then: a function's text is asked by an activity
        described["instructions"] = "function"
    if agent.native_tools:  # only then, like output_mode: what the provider may run for it
        described["native_tools"] = [t.model_dump(mode="json") for t in agent.native_tools]
    if agent.settings.background:  # a background model call polls: other commands
        described["background"] = True
    if agent.mcp_servers:  # what the run lists and calls, not where the servers run
        described["mcp_servers"] = [
            {name: _value(getattr(s, name, None), 0) for name in _MCP_FIELDS}
            for s in agent.mcp_servers
        ]
        described["mcp_list_tools"] = agent.mcp_list_tools
    return described


def describe_capability(cap: CapabilityLike) -> dict[str, Any]:
    """A capability as its class and configuration."""
    if isinstance(cap, type):
        return {"type": _qualified(cap)}
    return {"type": _qualified(type(cap)), "config": _fields(cap, 0)}


def _output_type(output_type: Any) -> Any:
    if output_type is str:
        return "str"
    try:
        schema = TypeAdapter(output_type).json_schema()
    except Exception:  # noqa: BLE001 - a type pydantic cannot describe: named only
        schema = None
    return {"type": _qualified(output_type), "schema": schema}


def _tool(tool: Tool) -> dict[str, Any]:
    return {
        "name": tool.name, "description": tool.description, "schema": tool.json_schema,
        "kind": tool.kind, "max_retries": tool.max_retries, "in_workflow": tool.in_workflow,
        "idempotent": tool.idempotent, "metadata": _value(dict(tool.metadata), 0),
        **({"executor": tool.executor} if tool.executor != "worker" else {}),  # a client's tool
    }


def _qualified(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{module}.{name}"


def _fields(obj: Any, depth: int) -> dict[str, Any]:
    """The configuration of an object: dataclass fields, a pydantic model's, or its attributes."""
    if dataclasses.is_dataclass(obj):
        # A field added to a capability later, marked `ADDED_OPTION`, counts only once it is
        # set: agents that do not use it keep their version (and their runs keep replaying).
        names = [f.name for f in dataclasses.fields(obj)
                 if not (f.metadata.get(ADDED_OPTION) and getattr(obj, f.name) == _default(f))]
    elif isinstance(obj, BaseModel):
        names = list(type(obj).model_fields)
    else:
        attributes: dict[str, Any] = dict(getattr(obj, "__dict__", None) or {})
        names = [k for k in attributes if not k.startswith("_")]
    return {name: _value(getattr(obj, name, None), depth + 1) for name in names}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _value(value: Any, depth: int) -> Any:
    """A configuration value in canonical JSON form."""
    from towline.agent import Agent

    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    if depth > _DEPTH:
        return {"type": _qualified(type(value))}
    if isinstance(value, enum.Enum):
        return {"enum": _qualified(type(value)), "value": _value(value.value, depth + 1)}
    if isinstance(value, timedelta):
        return {"timedelta": value.total_seconds()}
    if isinstance(value, Agent):
        return {"agent": value.name, "version": agent_version(value)}
    if isinstance(value, Tool):
        return {"tool": _tool(value)}
    if isinstance(value, type) or callable(value) and not _is_config_object(value):
        return {"ref": _qualified(value)}  # functions, classes, models: by name
    if isinstance(value, Mapping):
        items: Mapping[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        return {str(k): _value(v, depth + 1) for k, v in items.items()}
    if isinstance(value, list | tuple):
        return [_value(v, depth + 1) for v in value]  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, set | frozenset):
        members = [_value(v, depth + 1) for v in value]  # pyright: ignore[reportUnknownVariableType]
        return sorted(members, key=lambda m: json.dumps(m, sort_keys=True))
    if isinstance(value, bytes):
        return {"bytes": hashlib.sha256(value).hexdigest()}
    return {"type": _qualified(type(value)), "config": _fields(value, depth)}


def _is_config_object(value: Any) -> bool:
    """A callable that is configuration (a dataclass or pydantic value), not a function."""
    return dataclasses.is_dataclass(value) or isinstance(value, BaseModel)


def is_frozen(value: Any, depth: int = 0) -> bool:
    """Whether no code can change `value` in place: immutable values all the way down.

    Frozen dataclasses and pydantic models count when their fields are frozen too;
    functions, classes, agents and tools count as frozen (an agent's own capabilities
    are watched when it runs).
    """
    from towline.agent import Agent

    if value is None or isinstance(value, bool | int | float | str | bytes | timedelta | enum.Enum):
        return True
    if depth > _DEPTH:
        return False
    if isinstance(value, Agent | Tool | type) or callable(value) and not _is_config_object(value):
        return True
    if isinstance(value, tuple | frozenset):
        members: tuple[Any, ...] | frozenset[Any] = value  # pyright: ignore[reportUnknownVariableType]
        return all(is_frozen(v, depth + 1) for v in members)
    kind: Any = value.__class__
    params: Any = getattr(kind, "__dataclass_params__", None)
    if params is not None:
        names = [f.name for f in dataclasses.fields(kind)]
        return bool(params.frozen) and all(
            is_frozen(getattr(value, name, None), depth + 1) for name in names)
    if isinstance(value, BaseModel):
        return bool(type(value).model_config.get("frozen")) and all(
            is_frozen(getattr(value, name, None), depth + 1) for name in type(value).model_fields)
    return False
