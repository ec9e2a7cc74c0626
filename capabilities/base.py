"""`Capability` (the hook base class) and `Middleware` (hooks as a value).

Both families run on one engine. A capability in an agent's list is a class
(used as is) or a configured instance; that value is passed as `self`, so
configuration is explicit and there is no global state. A `Middleware` is a
value whose fields are plain functions. Hooks may be sync or async.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from towline.messages import ModelResponse
from towline.tools import Tool, ToolCall, ToolContext, ToolReturn

from .state import ModelCallRequest, ModelRequestState

__all__ = [
    "Capability",
    "Middleware",
    "CapabilityLike",
    "NextModelCall",
    "JumpTo",
    "hook_of",
    "cap_name",
    "cap_tools",
    "cap_state_schema",
    "cap_activities",
    "is_activity",
    "cap_models",
    "MIDDLEWARE_HOOKS",
    "ADDED_OPTION",
]

ADDED_OPTION = "towline.added_option"
"""Field metadata (`field(default=..., metadata={ADDED_OPTION: True})`) of a capability option
added after agents that lack it recorded their version: the agent's fingerprint
(`towline.runtime.fingerprint`) leaves it out while it has its default, so those agents keep
their version and their runs keep replaying."""

JumpTo = Literal["model", "tools", "end"]
"""Where an `after_model` hook may send the run next (its update's `jump_to`)."""
NextModelCall = Callable[[ModelCallRequest], Awaitable[ModelResponse]]
"""The rest of the chain a `wrap_model_call` wrapper calls: the next wrapper, or the model."""
StateUpdate = Mapping[str, Any] | None


class Capability:
    """Base class of capabilities: every hook is a no-op until overridden.

    Subclasses hold configuration only (frozen dataclasses or pydantic models
    work well); per-run state goes in contributed state keys (`state_schema`).
    A subclass may also define the middleware hooks `before_model`,
    `after_model` and `wrap_model_call`, and contribute `tools` and
    `state_schema`.
    """

    tools: Sequence[Tool] = ()
    """Tools added to the agent's inventory."""
    state_schema: Mapping[str, Any] = {}
    """`{key: default}` or `{key: (default, reducer)}` merged into the run state."""
    hook_models: Sequence[Any] = ()
    """`Model` objects the hooks call (`HookContext.call_model` by their name): every worker serving the
    agent registers them, as it registers the agent's own model."""
    activities: Sequence[Callable[..., Any]] = ()
    """Activities (`@activity.defn` functions) the hooks call with
    `workflow.execute_activity`: their I/O happens there, never in the hook. Every worker
    serving the agent registers them (`towline worker` too)."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState | Awaitable[ModelRequestState]:
        """Before each model request: return the (possibly modified) state."""
        return state

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState | Awaitable[ModelRequestState]:
        """After the model responded (`state.response`, merged `state.usage`): return the state."""
        return state

    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall | Awaitable[ToolCall]:
        """Before a tool executes: return the (possibly transformed) call."""
        return call

    def before_tool_return(
        self, ctx: ToolContext, call: ToolCall, result: ToolReturn
    ) -> ToolReturn | Awaitable[ToolReturn]:
        """After a tool executed, before its return is recorded and the model sees it: return
        `result`, or a replacement (its `content`, or `status` `"denied"` to withhold it).
        Engine 4; hooks compose in list order, each seeing the one before's replacement."""
        return result

    def after_tool_execute(
        self, ctx: ToolContext, call: ToolCall, result: ToolReturn
    ) -> None | Awaitable[None]:
        """After a tool executed: observe its return record (as recorded)."""
        return None


@dataclass(frozen=True)
class Middleware:
    """Hooks as a value: `Middleware("name", before_model=fn, ...)`."""

    name: str
    """Unique within an agent."""
    before_model: Callable[[dict[str, Any]], StateUpdate | Awaitable[StateUpdate]] | None = None
    """`(state) -> update`, first → last; applied to the working state and persisted."""
    after_model: Callable[[dict[str, Any]], StateUpdate | Awaitable[StateUpdate]] | None = None
    """`(state) -> update`, last → first; may set `jump_to`."""
    wrap_model_call: Callable[[ModelCallRequest, NextModelCall], Awaitable[ModelResponse]] | None = None
    """`(request, next) -> response`; the first middleware is outermost."""
    tools: Sequence[Tool] = ()
    """Tools added to the agent's inventory."""
    state_schema: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """`{key: default}` or `{key: (default, reducer)}` merged into the run state."""
    activities: Sequence[Callable[..., Any]] = ()
    """Activities the hooks call (`workflow.execute_activity`); workers register them."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a Middleware needs a name")


CapabilityLike = Capability | type[Capability] | Middleware
"""What an agent's `capabilities` list holds: a capability class, a configured instance, or a
middleware value."""

MIDDLEWARE_HOOKS = ("before_model", "after_model", "wrap_model_call")


def hook_of(cap: CapabilityLike, hook: str) -> Callable[..., Any] | None:
    """The callable for `hook` with `cap` bound as `self`, or None when it is a no-op."""
    if isinstance(cap, Middleware):
        fn = getattr(cap, hook, None) if hook in MIDDLEWARE_HOOKS else None
        return fn if callable(fn) else None
    cls = cap if isinstance(cap, type) else type(cap)
    fn = getattr(cls, hook, None)
    if fn is None or fn is getattr(Capability, hook, None):
        return None

    def bound(*args: Any) -> Any:
        return fn(cap, *args)

    bound.__wrapped__ = fn  # pyright: ignore[reportFunctionMemberAccess]
    return bound


def cap_name(cap: CapabilityLike) -> str:
    """A capability's name: `Middleware.name`, a `name` attribute, or the class name."""
    if isinstance(cap, Middleware):
        return cap.name
    name = getattr(cap, "name", None)
    if isinstance(name, str) and name:
        return name
    return cap.__name__ if isinstance(cap, type) else type(cap).__name__


def cap_tools(cap: CapabilityLike) -> tuple[Tool, ...]:
    """Tools the capability contributes."""
    tools: Any = getattr(cap, "tools", ())
    if callable(tools):
        tools = tools()
    return tuple(t for t in tools if isinstance(t, Tool))


def cap_state_schema(cap: CapabilityLike) -> dict[str, Any]:
    """State keys the capability contributes."""
    schema: Any = getattr(cap, "state_schema", {})
    if callable(schema):
        schema = schema()
    return dict(schema)


def is_activity(fn: Any) -> bool:
    """Whether `fn` is an `@activity.defn` function (a `Handoff.on_handoff` run as an
    activity, say)."""
    return fn is not None and getattr(fn, "__temporal_activity_definition", None) is not None


def cap_activities(cap: CapabilityLike) -> tuple[Callable[..., Any], ...]:
    """Activities the capability's hooks call, for workers to register."""
    activities: Any = getattr(cap, "activities", ())
    return tuple(activities)


def cap_models(cap: CapabilityLike) -> tuple[Any, ...]:
    """`Model` objects the capability's hooks call, for workers to register by name."""
    models: Any = getattr(cap, "hook_models", ())
    if callable(models):
        models = models()
    return tuple(m for m in models if not isinstance(m, str))
