"""The payloads of towline's activities (shared by workflow and activity sides)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from towline.messages import Message, Usage
from towline.options import ModelSettings
from towline.tools import ToolContext, ToolDefinition

__all__ = [
    "ModelActivityInput", "ToolActivityInput", "ToolActivityResult", "ENTERED_KEY",
]

ENTERED_KEY = "towline_entered"
"""Heartbeat detail key of a non-idempotent tool call: the attempt that entered the tool
function (see `activities/heartbeat.py`); read by the workflow after a timeout."""


class ModelActivityInput(BaseModel):
    """Input of `towline.model_request`."""

    model: str
    messages: list[Message]
    tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    output_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    settings: ModelSettings = Field(default_factory=ModelSettings)
    run_step: int = 0
    agent: str = ""
    message_refs: list[str] | None = None
    """When set, the request's messages by reference (see `towline/request_refs.py`);
    `messages` then holds only those the run had not sent before."""
    request_key: str | None = None
    """Names the request for the `towline.request_messages` query (cache misses)."""


class ToolActivityInput(BaseModel):
    """Input of `towline.tool.<name>`: validated JSON arguments and the call's context."""

    args: dict[str, Any]
    ctx: ToolContext


class ToolActivityResult(BaseModel):
    """What a tool activity confirms: a result, a retry request, or a failure without effect."""

    status: Literal["succeeded", "retry", "failed"]
    content: Any = None
    usage: Usage = Field(default_factory=Usage)
    state: dict[str, Any] | None = None
    """A `ToolResult.state` update, applied by the workflow when the call is recorded."""
