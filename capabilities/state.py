"""The values model hooks see: `ModelRequestState` and `ModelCallRequest`.

A `ModelRequestState` is frozen: a hook returns a replaced copy
(`state.model_copy(update=...)`). The six runtime-owned counters are restored
after every hook; `run_id`, `scope`, `validators` and `usage` are internal and
replacing them is a `CapabilityViolation`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from towline.messages import Message, ModelResponse, Usage
from towline.native_tools import NativeTool
from towline.options import ModelSettings
from towline.results import Counters
from towline.tools import ToolDefinition

__all__ = [
    "AgentView",
    "RunScope",
    "PreparedValidators",
    "ModelRequestParams",
    "ModelRequestState",
    "ModelCallRequest",
    "RUNTIME_OWNED",
    "INTERNAL",
]


class AgentView(BaseModel):
    """The agent as a model hook sees it. `output_retries` is runtime-owned."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The agent's name (read-only: restored after every hook)."""
    instructions: str | None = None
    """System instructions sent first with this request; hooks may edit them."""
    output_retries: int
    """The run's output-retries limit (runtime-owned)."""


class RunScope(BaseModel):
    """Internal: the run's identity and authority."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    agent: str
    allowed_tools: frozenset[str] | None = None
    """Ancestor authority: tools an ancestor run may execute (None: no ancestor)."""


class PreparedValidators:
    """Internal: the argument validators of the agent's tools (opaque to hooks)."""

    __slots__ = ("_names",)

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names

    @property
    def names(self) -> frozenset[str]:
        """Tools with a prepared validator."""
        return self._names

    def __repr__(self) -> str:
        return f"PreparedValidators({sorted(self._names)})"


class ModelRequestParams(BaseModel):
    """Request parameters a hook may select."""

    model_config = ConfigDict(frozen=True)

    function_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """The selected tools: this request's executable set."""
    output_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """The structured-output tool (when the agent has an `output_type`)."""
    native_tools: list[NativeTool] = Field(default_factory=list[NativeTool])
    """The provider's own tools offered (`Agent.native_tools`); a hook may leave some out or
    change their options for one request."""


class ModelRequestState(BaseModel):
    """The state of one model request, passed through the capability hooks."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    messages: list[Message]
    """The canonical history (restored after every hook; rewrite it with middleware)."""
    request_messages: list[Message]
    """What is sent to the model; set it to project history without touching it."""
    model: str
    """The selected model's name."""
    settings: ModelSettings
    """The request's settings."""
    params: ModelRequestParams
    """Selected tools."""
    agent: AgentView
    """Instructions (editable) and the output-retries limit (runtime-owned)."""
    response: ModelResponse | None = None
    """The model's response (in `after_model_request`); hooks may transform it."""
    state: dict[str, Any] = Field(default_factory=dict)
    """A read-only copy of the contributed state keys."""
    context: Any = None
    """The run's context (`RunInput.context`) as its agent's `context_type` instance, or
    None; a copy, restored after every hook (engine 5)."""

    tool_retries: dict[str, int]
    """Runtime-owned: per tool, consecutive failures."""
    output_retries_used: int
    """Runtime-owned: output corrections used."""
    run_step: int
    """Runtime-owned: the number of the model request being made, from 1."""
    tool_calls: int
    """Runtime-owned: tool executions started."""
    max_steps: int
    """Runtime-owned: the run's max_steps."""

    run_id: str
    """Internal: the run's id."""
    scope: RunScope
    """Internal: identity and authority."""
    validators: PreparedValidators
    """Internal: prepared argument validators."""
    usage: Usage
    """Internal: the run's merged usage (including this response's, after the call)."""


RUNTIME_OWNED: tuple[str, ...] = tuple(
    name for name in ModelRequestState.model_fields if name in Counters.model_fields)
"""Top-level runtime-owned fields: the state's copies of the run's counters (`tool_retries`,
`output_retries_used`, `run_step`, `tool_calls`, `max_steps`; the sixth,
`agent.output_retries`, lives in `agent`)."""
INTERNAL = ("run_id", "scope", "validators", "usage")
"""Fields whose replacement fails the run."""


class ModelCallRequest(BaseModel):
    """What `wrap_model_call` receives and passes to `next`."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    messages: list[Message]
    """Messages sent (instructions already first)."""
    tools: list[ToolDefinition]
    """Offered function tools; narrowing them also narrows what may execute."""
    state: dict[str, Any]
    """The working run state (messages and contributed keys)."""
    model: str
    """The model to call."""
    settings: ModelSettings
    """The settings to send."""
    output_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """The structured-output tool, if any."""
    native_tools: list[NativeTool] = Field(default_factory=list[NativeTool])
    """The provider's own tools offered (narrow them to offer fewer)."""
    run_step: int = 0
    """The step this call belongs to (read-only)."""
    context: Any = None
    """The run's context (`RunInput.context`) as its agent's `context_type` instance, or None;
    a copy for each wrapper: what one changes, or passes to `next`, reaches nothing (engine 5)."""
