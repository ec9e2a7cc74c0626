"""towline: AI agents as durable Temporal workflows.

Model calls and tool executions are activities; capability hooks run as
deterministic workflow code between them; Temporal's history records the
runtime-owned counters exactly as the runtime confirmed them.
"""

from towline.agent import Agent
from towline.capabilities.base import Capability, Middleware
from towline.capabilities.state import ModelCallRequest, ModelRequestState
from towline.codec import EncryptionCodec, KeyProvider
from towline.errors import (
    CapabilityViolation,
    ConfigurationError,
    ModelRetry,
    RunError,
    RunFailure,
    ToolDenied,
    ToolError,
    TowlineError,
)
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    Remove,
    RemoveAll,
    RetryPart,
    SystemPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
)
from towline.options import Limits, ModelSettings
from towline.plugin import TowlinePlugin
from towline.results import Counters, PartialRun, RunInput, RunResult
from towline.tools import Tool, ToolCall, ToolContext, ToolDefinition, ToolResult, ToolReturn, tool

__all__ = [
    "Agent",
    "Tool",
    "tool",
    "Capability",
    "Middleware",
    "RunInput",
    "RunResult",
    "RunError",
    "Usage",
    "ModelSettings",
    "Limits",
    "ToolCall",
    "ToolReturn",
    "ToolContext",
    "ToolDefinition",
    "ToolResult",
    "ModelRequestState",
    "ModelCallRequest",
    "RemoveAll",
    "Remove",
    "TowlinePlugin",
    "Counters",
    "PartialRun",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "SystemPart",
    "UserPart",
    "TextPart",
    "ToolCallPart",
    "ToolReturnPart",
    "RetryPart",
    "ModelRetry",
    "ToolError",
    "ToolDenied",
    "TowlineError",
    "RunFailure",
    "CapabilityViolation",
    "ConfigurationError",
    "EncryptionCodec",
    "KeyProvider",
]
