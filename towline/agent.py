"""`Agent`: the definition a run executes.

An agent is configuration only and is shared between runs. Its `name` is the key
a client uses to start a run, so it must be stable. Everything a hook can reach of it
is read-only: the tools and capabilities are tuples, the inventory and the state
schema read-only mappings, and each run starts from its own copy of the state
defaults, so no run can change the agent for the runs after it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter
from temporalio.common import RetryPolicy

from towline.capabilities.base import (
    CapabilityLike,
    Middleware,
    cap_name,
    cap_state_schema,
    cap_tools,
)
from towline.errors import ConfigurationError
from towline.mcp import MCPServer, check_servers
from towline.native_tools import NativeTool, check_native_tools
from towline.options import (
    BACKGROUND_TIMEOUT,
    MODEL_HEARTBEAT_TIMEOUT,
    MODEL_POLL_INTERVAL,
    MODEL_POLL_MAX_INTERVAL,
    MODEL_TIMEOUT,
    Limits,
    ModelSettings,
    OutputMode,
    model_retry_policy,
)
from towline.runtime.instructions import InstructionsFunc
from towline.runtime.model_types import Model
from towline.tools import Tool, ToolDefinition

__all__ = ["Agent", "OUTPUT_TOOL_NAME"]

OUTPUT_TOOL_NAME = "final_result"


@dataclass(frozen=True, eq=False)
class Agent:
    """An agent: model, instructions, tools, capabilities, limits and output type."""

    name: str
    """Stable key a client starts runs by."""
    model: str | Model = "test"
    """A model name (`"test"`, a name registered with the plugin) or a `Model`."""
    instructions: str | InstructionsFunc | None = None
    """System instructions, sent first with every request: text, or a function of an
    `InstructionsContext` (sync or async) returning the text, which the worker runs as an
    activity (`towline.instructions`) once per run, before the first request (it may use
    the run's context and the worker's `deps`); its answer is recorded in the history, so a
    replay reads it from there and never calls the function again."""
    context_type: type[BaseModel] | None = None
    """The pydantic model of the run's context (`RunInput.context`): validated when the run
    starts (a missing, ill-typed or unknown key ends it with `InvalidRunInput` naming the
    key) and handed to tools (`ToolContext.context`), hooks and dynamic instructions as an
    instance. Keys a capability declares in `state_schema` are initial state instead.
    None: the context may hold only such state keys."""
    tools: Sequence[Tool] = ()
    """The agent's own tools."""
    capabilities: Sequence[CapabilityLike] = ()
    """Capabilities and middleware, in order."""
    limits: Limits = field(default_factory=Limits)
    """Budgets of a run (a run's input may override them)."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Default model settings."""
    output_type: Any = str
    """`str` for a text answer, or a type (e.g. a pydantic model) to validate output against."""
    output_mode: OutputMode = "tool"
    """How a structured `output_type` is asked for: `"tool"` (an output tool the model
    calls), `"native"` (the provider's JSON-schema response format: the answer is JSON
    text that must match the strict schema) or `"prompted"` (the schema goes into the
    instructions and the JSON is parsed from the text, code fences allowed). Invalid
    output is retried in every mode and counts towards `output_retries`."""
    model_timeout: timedelta = MODEL_TIMEOUT
    """Start-to-close timeout of one model activity attempt (long answers of large
    models take minutes; a lost worker is noticed by the heartbeat timeout instead)."""
    model_heartbeat_timeout: timedelta | None = MODEL_HEARTBEAT_TIMEOUT
    """The model activity heartbeats while it waits for the provider: if a worker dies
    mid-request, Temporal retries the request elsewhere after this long."""
    model_retry_policy: RetryPolicy = field(default_factory=model_retry_policy)
    """Temporal's retry policy for model activities (provider SDK retries are off)."""
    tool_heartbeat_timeout: timedelta = timedelta(seconds=30)
    """Heartbeat timeout of tool activities whose tool sets none: a worker lost mid-call
    is noticed (and the call retried or reported) within this time."""
    mcp_servers: Sequence[MCPServer] = ()
    """MCP servers whose tools join the run's inventory (`towline[mcp]` on the worker)."""
    mcp_list_tools: Literal["per_run", "per_turn"] = "per_run"
    """List the MCP servers' tools once per run, or before every turn (so a tool a server
    gained or lost mid-run is picked up)."""
    native_tools: Sequence[NativeTool] = ()
    """The provider's own tools the model may use (`towline.native_tools`: `WebSearch`,
    `WebFetch`, `CodeExecution`, `FileSearch`, `HostedMCP`): the provider runs them inside
    its response; a provider without one fails the run before anything is sent."""
    model_poll_interval: timedelta = MODEL_POLL_INTERVAL
    """Background model calls (`ModelSettings.background`): the first wait before polling the
    provider; each later wait doubles, up to `model_poll_max_interval`. Durable timers: no
    worker is busy while the model works."""
    model_poll_max_interval: timedelta = MODEL_POLL_MAX_INTERVAL
    """The longest wait between two polls of a background model call (a day of waiting is
    then about 720 polls)."""
    model_background_timeout: timedelta = BACKGROUND_TIMEOUT
    """How long a background model call may go unfinished: polled this long (or
    `MAX_BACKGROUND_POLLS` times, whichever comes first, so that its history stays far
    from Temporal's limit), it is cancelled and the run fails `BackgroundTimeout` with the
    partial run."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("an Agent needs a name")
        for name in ("model_timeout", "tool_heartbeat_timeout", "model_poll_interval",
                     "model_poll_max_interval", "model_background_timeout"):
            if getattr(self, name) <= timedelta(0):
                raise ConfigurationError(f"agent {self.name!r}: {name} must be positive")
        object.__setattr__(self, "mcp_servers", check_servers(self.name, self.mcp_servers))
        object.__setattr__(self, "native_tools",
                           check_native_tools(f"agent {self.name!r}", self.native_tools))
        if self.model_poll_max_interval < self.model_poll_interval:
            raise ConfigurationError(f"agent {self.name!r}: model_poll_max_interval must not be "
                                     "shorter than model_poll_interval")
        if self.mcp_list_tools not in ("per_run", "per_turn"):
            raise ConfigurationError(f"agent {self.name!r}: mcp_list_tools must be 'per_run' or "
                                     f"'per_turn', not {self.mcp_list_tools!r}")
        if self.output_mode not in ("tool", "native", "prompted"):
            raise ConfigurationError(f"agent {self.name!r}: output_mode must be 'tool', 'native' "
                                     f"or 'prompted', not {self.output_mode!r}")
        if self.output_mode != "tool" and self.output_type is str:
            raise ConfigurationError(f"agent {self.name!r}: output_mode {self.output_mode!r} needs "
                                     f"a structured output_type (a text answer needs no schema)")
        if self.instructions is not None and not isinstance(self.instructions, str) \
                and not callable(self.instructions):
            raise ConfigurationError(f"agent {self.name!r}: instructions must be text or a "
                                     f"function, not {type(self.instructions).__name__}")
        given: Any = self.context_type  # checked at runtime, whatever its type says
        if given is not None and not (isinstance(given, type) and issubclass(given, BaseModel)):
            raise ConfigurationError(f"agent {self.name!r}: context_type must be a pydantic "
                                     f"model class, not {self.context_type!r}")
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "capabilities", tuple(self.capabilities))
        seen: set[str] = set()
        for cap in self.capabilities:
            if isinstance(cap, Middleware):
                if cap.name in seen:
                    raise ConfigurationError(
                        f"agent {self.name!r}: two middlewares are named {cap.name!r}"
                    )
                seen.add(cap.name)
        _ = self.inventory, self._pristine_schema  # validate eagerly

    @property
    def static_instructions(self) -> str | None:
        """The instructions when they are text (None when a function gives them)."""
        return self.instructions if isinstance(self.instructions, str) else None

    @property
    def model_name(self) -> str:
        """The name of the agent's default model."""
        return self.model if isinstance(self.model, str) else self.model.name

    @cached_property
    def inventory(self) -> MappingProxyType[str, Tool]:
        """All tools: the agent's own and those its capabilities contribute (read-only)."""
        tools: dict[str, Tool] = {}
        contributed = [t for cap in self.capabilities for t in cap_tools(cap)]
        for t in [*self.tools, *contributed]:
            if t.name in tools and tools[t.name].function is not t.function:
                raise ConfigurationError(f"agent {self.name!r}: two tools are named {t.name!r}")
            if t.name == OUTPUT_TOOL_NAME:
                raise ConfigurationError(f"tool name {OUTPUT_TOOL_NAME!r} is reserved")
            tools[t.name] = t
        return MappingProxyType(tools)

    @cached_property
    def _pristine_schema(self) -> dict[str, Any]:
        """The contributed keys as the capabilities declared them when the agent was made
        (deep copies, which only `state_defaults` reads)."""
        schema: dict[str, Any] = {}
        for cap in self.capabilities:
            for key, spec in cap_state_schema(cap).items():
                if key in ("messages", "llm_usage", "jump_to", "context"):
                    raise ConfigurationError(f"{cap_name(cap)}: state key {key!r} is reserved")
                schema[key] = copy.deepcopy(spec)
        return schema

    @cached_property
    def state_schema(self) -> MappingProxyType[str, Any]:
        """Contributed state keys: `{key: default}` or `{key: (default, reducer)}`, read-only
        all the way down (list defaults read as tuples, dicts as read-only mappings)."""
        return MappingProxyType({k: _frozen(v) for k, v in self._pristine_schema.items()})

    def state_defaults(self) -> dict[str, Any]:
        """Fresh initial values of the contributed state keys, for one run.

        Deep copies of the defaults as the agent was defined: whatever a run (or a
        hook holding `state_schema`) does to a default object reaches no other run.
        """
        return {
            key: copy.deepcopy(spec[0] if _reducer_pair(spec) else spec)
            for key, spec in self._pristine_schema.items()
        }

    @cached_property
    def output_adapter(self) -> TypeAdapter[Any] | None:
        """Validator of structured output, or None for text output."""
        return None if self.output_type is str else TypeAdapter(self.output_type)

    @cached_property
    def output_wrapped(self) -> bool:
        """Whether the output schema is not an object and is wrapped as `{"response": ...}`."""
        adapter = self.output_adapter
        return adapter is not None and adapter.json_schema().get("type") != "object"

    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema of structured output, always an object (a non-object output type
        is wrapped as `{"response": ...}`, its `$defs` kept at the root), or None for text
        output. The output tool's parameters, and what the native and prompted modes send."""
        adapter = self.output_adapter
        if adapter is None:
            return None
        schema = adapter.json_schema()
        if self.output_wrapped:
            # `$defs` stay at the top: a `$ref` (`#/$defs/...`) is resolved from the root
            inner = {k: v for k, v in schema.items() if k != "$defs"}
            wrapped: dict[str, Any] = {"type": "object", "properties": {"response": inner},
                                       "required": ["response"]}
            if "$defs" in schema:
                wrapped["$defs"] = schema["$defs"]
            schema = wrapped
        return schema

    def output_tool(self) -> ToolDefinition | None:
        """The structured-output tool offered to the model (`output_mode="tool"` only)."""
        schema = self.output_schema()
        if schema is None or self.output_mode != "tool":
            return None
        description = "Give the final answer."
        if isinstance(self.output_type, type) and issubclass(self.output_type, BaseModel):
            description = self.output_type.__doc__ or description
        return ToolDefinition(
            name=OUTPUT_TOOL_NAME, description=description, parameters_json_schema=schema,
            kind="output", max_retries=self.limits.output_retries,
        )

    def all_agents(self) -> list[Agent]:
        """This agent and every sub-agent its capabilities run, depth first."""
        found: list[Agent] = [self]
        for cap in self.capabilities:
            for sub in _sub_agents(cap):
                for a in sub.all_agents():
                    if all(a is not f for f in found):
                        found.append(a)
        return found


def _sub_agents(cap: CapabilityLike) -> tuple[Agent, ...]:
    """Agents the capability runs (sub-agents: its `agents`, a sequence or a method returning
    one), so workers register them too. Here rather than beside `Capability`, which then
    needs no `Agent`: the capability and agent modules would otherwise import each other."""
    agents: Any = getattr(cap, "agents", ())
    if callable(agents):
        agents = agents()
    return tuple(agents)


def _reducer_pair(spec: Any) -> bool:
    """Whether a state_schema entry is `(default, reducer)` rather than a plain default."""
    return isinstance(spec, tuple) and len(spec) == 2 and callable(spec[1])  # pyright: ignore[reportUnknownArgumentType]


def _frozen(value: Any) -> Any:
    """A read-only copy of a state default: tuples for lists, read-only mappings for dicts."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        items: dict[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        return MappingProxyType({k: _frozen(v) for k, v in items.items()})
    if isinstance(value, set):
        members: set[Any] = value  # pyright: ignore[reportUnknownVariableType]
        return frozenset(members)
    return copy.deepcopy(value)
