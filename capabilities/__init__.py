"""Capabilities: the hook base class, middleware, composition helpers and built-ins."""

from .base import Capability, CapabilityLike, JumpTo, Middleware, NextModelCall
from .compose import (
    run_after_model_request,
    run_after_tool_execute,
    run_before_model_request,
    run_before_tool_execute,
)
from .state import (
    AgentView,
    ModelCallRequest,
    ModelRequestParams,
    ModelRequestState,
)

__all__ = [
    "Capability",
    "CapabilityLike",
    "JumpTo",
    "Middleware",
    "NextModelCall",
    "ModelRequestState",
    "ModelRequestParams",
    "ModelCallRequest",
    "AgentView",
    "run_before_model_request",
    "run_after_model_request",
    "run_before_tool_execute",
    "run_after_tool_execute",
]
