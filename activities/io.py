"""The payloads of towline's activities (shared by workflow and activity sides)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from towline.messages import Message, Usage
from towline.options import ModelSettings
from towline.tools import ToolContext, ToolDefinition

__all__ = ["ModelActivityInput", "ToolActivityInput", "ToolActivityResult"]


class ModelActivityInput(BaseModel):
    """Input of `towline.model_request`."""

    model: str
    messages: list[Message]
    tools: list[ToolDefinition] = Field(default_factory=list)
    output_tools: list[ToolDefinition] = Field(default_factory=list)
    settings: ModelSettings = Field(default_factory=ModelSettings)
    run_step: int = 0
    agent: str = ""


class ToolActivityInput(BaseModel):
    """Input of `towline.tool.<name>`: validated JSON arguments and the call's context."""

    args: dict[str, Any]
    ctx: ToolContext


class ToolActivityResult(BaseModel):
    """What a tool activity confirms: a result, a retry request, or a failure without effect."""

    status: Literal["succeeded", "retry", "failed"]
    content: Any = None
    usage: Usage = Field(default_factory=Usage)
