"""Tools: functions the model may call, each executed as its own activity.

`Tool` holds the definition (name, description, JSON schema derived from the
function signature with pydantic), the retry budget the model gets for it, and
how Temporal runs it (timeouts, retry policy, the `idempotent` flag). The
prepared argument validator lives on the `Tool` and is used by the workflow;
hooks only ever see and select `ToolDefinition` values, so no hook can loosen
a schema. A tool may return media parts (an image, a document) for the model to see.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from types import MappingProxyType
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import PydanticSerializationError, to_jsonable_python
from temporalio.common import RetryPolicy

from towline.messages import ToolCallPart, ToolReturnPart, Usage
from towline.runtime.json_schemas import AnyArgs, checked_args, compiled_schema, schema_errors

__all__ = [
    "Tool",
    "tool",
    "ToolDefinition",
    "ToolContext",
    "ToolCall",
    "ToolReturn",
    "HANDOFF_KEY",
    "ToolFunc",
    "ToolResult",
    "tool_content",
    "SchemaClientTool",
]

HANDOFF_KEY = "towline.handoff"
"""`Tool.metadata` key of a `Handoff`'s tool: the agent it hands the run to. A handoff tool
executes nothing itself (the run goes on as that agent), so ancestor authority does not
apply to it; what the agent then runs is held to it."""

ToolCall = ToolCallPart
"""A tool call as hooks see it (`tool_name`, `args`, `tool_call_id`, `kind`, `metadata`): the
hook-side name of `towline.messages.ToolCallPart`, the same type."""
ToolReturn = ToolReturnPart
"""A tool's return record as hooks see it (`content`, `status`): the hook-side name of
`towline.messages.ToolReturnPart`, the same type."""

ToolFunc = Callable[..., Any]


def tool_content(value: Any) -> Any:
    """What a tool returned, as the JSON its return record holds.

    Pydantic values become their JSON form, so a media part (`ImageUrl`, `DocumentUrl`,
    `BinaryContent`, alone or in a list with text and other JSON) reads the same in the
    workflow, in history and after continue-as-new: a dict with its `kind` (bytes as
    base64), which `towline.messages.media_in` finds again. A value pydantic cannot
    serialise is left as it is (its payload fails to encode, as before).
    """
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, ValueError, TypeError):
        return value


class ToolResult(BaseModel):
    """What a tool may return to report usage besides its content (e.g. a sub-agent run)."""

    content: Any = None
    """What the model is given: text, JSON, or media parts (`ImageUrl`, `DocumentUrl`,
    `BinaryContent`), alone or in a list with text."""
    usage: Usage = Field(default_factory=Usage)
    """Model usage the tool incurred; folded into the run's usage and ledger."""
    state: dict[str, Any] | None = None
    """An update of contributed state keys (e.g. `{"todos": [...]}`), applied when the
    call succeeds, in call order, with each key's `state_schema` reducer (else replaced).
    A key no `state_schema` declares fails the run with `CapabilityViolation`."""


class ToolDefinition(BaseModel):
    """What a model is offered for one tool; hooks select and edit these."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The tool's name, unique in an agent's inventory."""
    description: str = ""
    """Shown to the model."""
    parameters_json_schema: dict[str, Any] = Field(default_factory=dict)
    """JSON schema of the arguments object."""
    max_retries: int = 1
    """Consecutive failures (retry requests, invalid arguments) the model is allowed."""
    kind: str = "function"
    """`function` for tools, `output` for the structured-output tool."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form metadata; copied onto calls of this tool."""


class ToolContext(BaseModel):
    """Handed to a tool (as its first parameter, if annotated) and to tool hooks."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    """The workflow id of the run (stable across continue-as-new)."""
    agent: str
    """The agent's name."""
    run_step: int
    """The model request that produced this call, from 1."""
    tool_name: str
    """The called tool."""
    tool_call_id: str
    """The call's id."""
    retry: int = 0
    """Consecutive failures of this tool so far in the run."""
    idempotency_key: str = ""
    """Stable across activity retries and worker crashes: `<run_id>/<run_step>/<tool_call_id>`.

    The step is part of it because providers may reuse call ids in later responses.
    """
    state: dict[str, Any] = Field(default_factory=dict)
    """A copy of the run's contributed state at the time of the call."""
    context: Any = None
    """The run's context (`RunInput.context`): an instance of the agent's
    `context_type`, validated when the run started; None when the agent declares none.
    Read-only: a copy, and the same in every call of the run (docs/agents-and-tools.md)."""
    deps: Any = Field(default=None, exclude=True, repr=False)
    """In a tool function: the worker's own dependencies (`TowlinePlugin(deps=...)`: a
    database pool, an HTTP client), never serialised; None in workflow code (hooks)."""


def _no_ctx_params(fn: ToolFunc) -> tuple[list[inspect.Parameter], bool]:
    params = list(inspect.signature(fn).parameters.values())
    hints = get_type_hints(fn)
    takes_ctx = bool(params) and hints.get(params[0].name) is ToolContext
    return (params[1:] if takes_ctx else params), takes_ctx


def _args_model(name: str, fn: ToolFunc) -> tuple[type[BaseModel], bool]:
    params, takes_ctx = _no_ctx_params(fn)
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for p in params:
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
    model: type[BaseModel] = create_model(
        f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model, takes_ctx


@dataclass(frozen=True)
class Tool:
    """A tool in an agent's inventory; build one with `@tool` or `Tool.from_function`."""

    name: str
    """Unique within an agent; also names the activity `towline.tool.<name>`."""
    function: ToolFunc = field(repr=False)
    """The sync or async function run by the activity."""
    description: str = ""
    """Shown to the model (defaults to the function's docstring)."""
    max_retries: int = 1
    """Consecutive failures the model is allowed before `ToolRetriesExhausted`."""
    kind: str = "function"
    """Copied onto the definition and every call of this tool."""
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Copied onto the definition and every call of this tool (kept read-only)."""
    idempotent: bool = False
    """Safe to run twice: Temporal retries it; otherwise an uncertain effect fails the run."""
    start_to_close_timeout: timedelta = timedelta(minutes=5)
    """How long one attempt may take."""
    heartbeat_timeout: timedelta | None = None
    """How soon a worker lost mid-call is noticed (the activity heartbeats on its own);
    None takes the agent's `tool_heartbeat_timeout` (30 s by default)."""
    retry_policy: RetryPolicy | None = None
    """Overrides the default: five attempts for an idempotent tool; for another, three
    attempts, of which only those that provably never entered the tool function are retried."""
    entry_mark: bool = True
    """A non-idempotent tool: record, durably and before each attempt enters the function,
    that it does (a heartbeat the server acknowledges: one RPC and one billable Temporal
    Action per call). With it, an attempt whose worker is lost before the function starts is
    provably without effect, so it is retried (or recorded `not_executed`). Without it
    (False: a call costs what a plain activity costs), such a loss cannot be told from one
    inside the function: the call is `unknown` and the run fails `UncertainToolEffect`
    (`bench/chaos.py --no-entry-mark`: 3 of 40 runs under 29 worker kills, against none with
    the mark). Ignored when idempotent: an idempotent tool needs no mark at all. An MCP
    server's tools always mark."""
    args_model: type[BaseModel] = field(default=BaseModel, repr=False)
    """The prepared validator of the arguments (derived from the signature)."""
    takes_ctx: bool = False
    """Whether the function's first parameter is a `ToolContext`."""
    executor: str = "worker"
    """Who runs it: `worker` (an activity), or `client`: the run records the call, waits durably
    for its result from outside (the `tool_result` update, `towline respond`), and checks it
    against the function's return type; the function (a stub) never runs."""
    client_timeout: timedelta | None = None
    """A client tool: how long to wait for its result (None: indefinitely; in a
    session, at most its `session_timeout`, whichever is shorter). Then the call is
    `unknown` (the client may have acted: the run fails `UncertainToolEffect`), or `denied`
    when the tool is `idempotent` (nothing is uncertain about an action that may be repeated:
    the model is told and may call it again)."""
    in_workflow: bool = False
    """Run the (async, deterministic) function as workflow code instead of an activity.

    For tools that orchestrate durable work themselves, such as a sub-agent's
    child workflow. The function must follow workflow determinism rules.
    """

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").isalnum():
            raise ValueError(f"tool name {self.name!r} must be alphanumeric, '_' or '-'")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.executor not in ("worker", "client"):
            raise ValueError(f"executor must be 'worker' or 'client', not {self.executor!r}")
        for name in ("start_to_close_timeout", "heartbeat_timeout", "client_timeout"):
            value = getattr(self, name)
            if value is not None and value <= timedelta(0):
                raise ValueError(f"{name} must be positive")
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        if self.args_model is BaseModel:
            model, takes_ctx = _args_model(self.name, self.function)
            object.__setattr__(self, "args_model", model)
            object.__setattr__(self, "takes_ctx", takes_ctx)

    @classmethod
    def from_function(cls, function: ToolFunc, **options: Any) -> Tool:
        """Build a tool; `options` are any other field of `Tool`."""
        name = options.pop("name", None) or function.__name__
        description = options.pop("description", None)
        if description is None:
            description = inspect.cleandoc(function.__doc__ or "")
        return cls(name=name, function=function, description=description, **options)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments object (derived from the signature; a copy)."""
        cached: dict[str, Any] | None = self.__dict__.get("_json_schema")
        if cached is None:  # computed once: a run offers its tools at every step
            cached = self.args_model.model_json_schema()
            object.__setattr__(self, "_json_schema", cached)
        return copy.deepcopy(cached)

    @property
    def runs_on_worker(self) -> bool:
        """Whether an activity runs it (not a client's tool, not a workflow tool)."""
        return self.executor == "worker" and not self.in_workflow

    @classmethod
    def client(cls, name: str, description: str = "", parameters: Mapping[str, Any] | None = None,
               *, result_schema: Mapping[str, Any] | None = None, **options: Any) -> Tool:
        """A tool the client runs, defined by a JSON schema of its arguments (no function):
        offered to the model like any other, its calls wait for their result from outside.
        `result_schema`, if given, is what a result must validate against."""
        return SchemaClientTool(name=name, function=_client_side, description=description,
                                executor="client", input_schema=dict(parameters or {"type": "object"}),
                                result_schema=dict(result_schema) if result_schema else None,
                                **options)

    @property
    def activity_name(self) -> str:
        """The Temporal activity type that runs this tool."""
        return f"towline.tool.{self.name}"

    def definition(self) -> ToolDefinition:
        """The definition offered to models and hooks."""
        return ToolDefinition(
            name=self.name,
            description=self.description,
            parameters_json_schema=self.json_schema,
            max_retries=self.max_retries,
            kind=self.kind,
            metadata=dict(self.metadata),
        )

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate arguments against the schema; returns their JSON form.

        Raises `pydantic.ValidationError` for invalid arguments.
        """
        return self.args_model.model_validate(dict(args)).model_dump(mode="json")

    def effective_retry_policy(self) -> RetryPolicy:
        """The retry policy of this tool's activity."""
        if self.retry_policy is not None:
            return self.retry_policy
        return RetryPolicy(maximum_attempts=5 if self.idempotent else 3)


def _client_side(**_: Any) -> Any:
    """A client tool's calls are answered from outside; nothing runs here."""
    raise RuntimeError("a client tool runs on the client")


@overload
def tool(function: ToolFunc, /) -> Tool: ...
@overload
def tool(
    function: None = None, /, **options: Any
) -> Callable[[ToolFunc], Tool]: ...
def tool(function: ToolFunc | None = None, /, **options: Any) -> Tool | Callable[[ToolFunc], Tool]:
    """Decorator: `@tool` or `@tool(max_retries=3, idempotent=True, ...)`."""
    if function is not None:
        return Tool.from_function(function, **options)

    def wrap(fn: ToolFunc) -> Tool:
        return Tool.from_function(fn, **options)

    return wrap


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
        try:  # checked once, here; the compiled validators are kept for every call
            _ = self._input_validator, self._result_validator
        except ValueError as e:
            raise ValueError(f"client tool {self.name!r}: invalid schema: {e}") from None

    @cached_property
    def _input_validator(self) -> Any:
        return compiled_schema(self.input_schema)

    @cached_property
    def _result_validator(self) -> Any:
        return None if self.result_schema is None else compiled_schema(self.result_schema)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The arguments' JSON schema."""
        return dict(self.input_schema)

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate against the schema; raises `pydantic.ValidationError` like any tool."""
        return checked_args(self._input_validator, args, self.name)

    def validate_output(self, result: Any) -> str | None:
        """What is wrong with `result` against `result_schema` (None: nothing)."""
        if self._result_validator is None:
            return None
        error = schema_errors(self._result_validator, result, self.name)
        return None if error is None else "; ".join(e["msg"] for e in error.errors())
