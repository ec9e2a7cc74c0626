"""The payloads of towline's activities (shared by workflow and activity sides).

They are written into the run's history at every step, so they carry only what
the other side does not know: defaults are left out of the JSON, a model request
names the messages its worker holds (`towline.runtime.request_chain`), and a tool call's
context is rebuilt on the worker from the activity's own identity (the run id is
the workflow id, the tool is the activity's, the idempotency key follows from
them).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from towline.messages import Message, Usage
from towline.native_tools import NativeTool
from towline.options import ModelSettings, OutputMode
from towline.runtime.request_chain import ChainedRequest
from towline.tools import ToolContext, ToolDefinition

__all__ = [
    "ModelActivityInput", "ToolActivityInput", "ToolActivityResult", "ENTERED_KEY",
    "MODEL_ACTIVITY", "MODEL_POLL_ACTIVITY", "MODEL_CANCEL_ACTIVITY", "BackgroundInput",
    "SEARCH_ATTRIBUTES_ACTIVITY", "USAGE_OUT_OF_RANGE", "TOO_LARGE",
]

MODEL_ACTIVITY = "towline.model_request"
"""The model activity's name (`towline.activities.model_request`), which the workflow schedules."""

MODEL_POLL_ACTIVITY = "towline.model_poll"
"""The activity that asks the provider once how a background model response is doing
(`ModelSettings.background`): the response if it is finished, else it still is suspended."""

MODEL_CANCEL_ACTIVITY = "towline.model_cancel"
"""The activity that cancels a background model response (the run was cancelled)."""

SEARCH_ATTRIBUTES_ACTIVITY = "towline.search_attributes"
"""The local activity a run asks which search attributes to upsert
(`towline.activities.search_attributes`)."""

ENTERED_KEY = "towline_entered"
"""Heartbeat detail key of a non-idempotent tool call: the attempt that entered the tool
function (see `activities/heartbeat.py`); read by the workflow after a timeout."""


def _empty(value: Any) -> bool:
    return not value


def _none(value: Any) -> bool:
    return value is None


def _zero(value: Any) -> bool:
    return value == 0


def _no_usage(value: Any) -> bool:
    return value == Usage()


def _default_settings(value: Any) -> bool:
    return value == ModelSettings()


class ModelActivityInput(BaseModel):
    """Input of `towline.model_request`."""

    model: str
    messages: list[Message] = Field(default_factory=list[Message], exclude_if=_empty)
    """The request's messages, inline (a model call outside an `AgentRun`)."""
    tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition], exclude_if=_empty)
    output_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition],
                                               exclude_if=_empty)
    settings: ModelSettings = Field(default_factory=ModelSettings, exclude_if=_default_settings)
    output_mode: OutputMode = Field(default="tool", exclude_if=lambda v: v == "tool")
    """How structured output is asked for (inline, like `tools`)."""
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=_none)
    """The output's JSON schema in the `native` and `prompted` modes (inline, like `tools`)."""
    native_tools: list[NativeTool] = Field(default_factory=list[NativeTool], exclude_if=_empty)
    """The provider's own tools offered (inline, like `tools`)."""
    run_step: int = 0
    agent: str = ""
    chain: ChainedRequest | None = Field(default=None, exclude_if=_none)
    """Inside an `AgentRun`: the request by reference (`towline/runtime/request_chain.py`); messages,
    tools and settings are then not inline."""


class BackgroundInput(BaseModel):
    """Input of `towline.model_poll` and `towline.model_cancel`: a background response by id."""

    model: str
    """The model that started it (the worker resolves it as for `towline.model_request`)."""
    response_id: str
    """The provider's id of the response."""
    run_step: int = 0
    agent: str = ""
    output_tools: list[str] = Field(default_factory=list[str], exclude_if=_empty)
    """The names of the output tools offered (their calls are output calls)."""


class ToolActivityInput(BaseModel):
    """Input of `towline.tool.<name>`: validated JSON arguments and what the worker cannot know.

    The worker rebuilds the `ToolContext` (`context()`): the run id is the workflow id,
    the tool is the activity's own, and the idempotency key follows from them.
    """

    args: dict[str, Any]
    agent: str = ""
    """The agent's name."""
    run_step: int = 0
    """The model request that produced this call."""
    tool_call_id: str = ""
    """The call's id."""
    retry: int = Field(default=0, exclude_if=_zero)
    """Consecutive failures of this tool so far in the run."""
    state: dict[str, Any] = Field(default_factory=dict[str, Any], exclude_if=_empty)
    """A copy of the run's contributed state at the time of the call."""
    entry_mark: bool = Field(default=True, exclude_if=bool)
    """A non-idempotent call: whether each attempt records durably that it enters the tool
    (`Tool.entry_mark`; False for tools that do not ask for it)."""
    idempotent: bool = Field(default=False, exclude_if=_empty)
    """The tool is declared idempotent (`Tool.idempotent`): recorded so that `towline reset`
    can tell, from the history alone, which calls may safely run again."""
    run_context: Any = Field(default=None, exclude_if=_none)
    """The run's context as JSON (`ToolContext.context`; the worker validates it
    again with the agent's `context_type`). Absent when the run has none."""

    @classmethod
    def of(cls, args: dict[str, Any], ctx: ToolContext) -> ToolActivityInput:
        """The input of a call with context `ctx`."""
        run_context = None if ctx.context is None else to_jsonable_python(ctx.context)
        return cls(args=args, agent=ctx.agent, run_step=ctx.run_step, tool_call_id=ctx.tool_call_id,
                   retry=ctx.retry, state=ctx.state, run_context=run_context)

    def context(self, tool_name: str, run_id: str) -> ToolContext:
        """The `ToolContext` the tool is given (`run_id`: the workflow id)."""
        return ToolContext(
            run_id=run_id, agent=self.agent, run_step=self.run_step, tool_name=tool_name,
            tool_call_id=self.tool_call_id, retry=self.retry,
            idempotency_key=f"{run_id}/{self.run_step}/{self.tool_call_id}", state=self.state,
            context=self.run_context,
        )


USAGE_OUT_OF_RANGE = "UsageOutOfRange"
"""Error type of a model or tool activity whose reported usage the ledger could not record."""
TOO_LARGE = "PayloadTooLarge"
"""Error type of a tool activity whose `ToolResult.state` is too large for a payload."""


class ToolActivityResult(BaseModel):
    """What a tool activity confirms: a result, a retry request, or a failure without effect."""

    status: Literal["succeeded", "retry", "failed"] = Field(
        default="succeeded", exclude_if=lambda v: v == "succeeded")
    """Left out of the JSON when the call succeeded (most calls: its bytes in every step)."""
    content: Any = None
    usage: Usage = Field(default_factory=Usage, exclude_if=_no_usage)
    state: dict[str, Any] | None = Field(default=None, exclude_if=_none)
    """A `ToolResult.state` update, applied by the workflow when the call is recorded."""
