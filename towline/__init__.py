"""towline: AI agents as durable Temporal workflows.

Model calls and tool executions are activities; capability hooks run as
deterministic workflow code between them; Temporal's history records the
runtime-owned counters exactly as the runtime confirmed them.
"""

from towline.runtime.heap import paused_gc as _paused_gc

# Importing builds thousands of classes and validators, and the collector would scan the
# growing heap over and over (about an eighth of a command's start-up): paused meanwhile.
with _paused_gc():
    from towline.agent import Agent
    from towline.capabilities.base import Capability, Middleware
    from towline.capabilities.state import ModelCallRequest, ModelRequestState
    from towline.encryption.codec import EncryptionCodec, KeyProvider
    from towline.errors import (
        Cancelled,
        CapabilityViolation,
        ConfigurationError,
        ContentBlocked,
        ContentFiltered,
        DuplicateToolCallId,
        GuardrailTripped,
        InternalError,
        InvalidRunInput,
        MaxStepsExceeded,
        MCPServerUnavailable,
        ModelRequestFailed,
        ModelRetry,
        NondeterministicHook,
        OutputRetriesExhausted,
        PayloadTooLarge,
        RunError,
        RunFailure,
        ToolCallIdentityChanged,
        ToolDenied,
        ToolError,
        ToolResponded,
        ToolRetriesExhausted,
        TowlineError,
        UncertainToolEffect,
        UnknownAgent,
        UsageLimitExceeded,
    )
    from towline.events import RunEvent
    from towline.mcp import MCPServer
    from towline.messages import (
        BinaryContent,
        DocumentUrl,
        ImageUrl,
        Message,
        ModelRequest,
        ModelResponse,
        NativeToolCallPart,
        NativeToolReturnPart,
        Remove,
        RemoveAll,
        RetryPart,
        SystemPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        Usage,
        UserPart,
    )
    from towline.native_tools import (
        CodeExecution,
        FileSearch,
        HostedMCP,
        UserLocation,
        WebFetch,
        WebSearch,
    )
    from towline.options import Limits, ModelSettings
    from towline.results import Counters, PartialRun, RunInput, RunResult
    from towline.runtime.plugin import TowlinePlugin
    from towline.storage.payload_store import FileStorageDriver, PayloadStore
    from towline.tools import (
        Tool,
        ToolCall,
        ToolContext,
        ToolDefinition,
        ToolResult,
        ToolReturn,
        tool,
    )

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
    "MCPServer",
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
    "ThinkingPart",
    "NativeToolCallPart",
    "NativeToolReturnPart",
    "ImageUrl",
    "DocumentUrl",
    "BinaryContent",
    "ModelRetry",
    "ToolError",
    "ToolDenied",
    "ToolResponded",
    "TowlineError",
    "RunFailure",
    "ConfigurationError",
    # run failure reasons (`RunError.reason` is the class name)
    "MaxStepsExceeded",
    "UsageLimitExceeded",
    "ToolRetriesExhausted",
    "OutputRetriesExhausted",
    "CapabilityViolation",
    "NondeterministicHook",
    "ToolCallIdentityChanged",
    "DuplicateToolCallId",
    "UncertainToolEffect",
    "ModelRequestFailed",
    "PayloadTooLarge",
    "ContentBlocked",
    "ContentFiltered",
    "GuardrailTripped",
    "Cancelled",
    "UnknownAgent",
    "InvalidRunInput",
    "InternalError",
    "MCPServerUnavailable",
    # data protection
    "EncryptionCodec",
    "KeyProvider",
    # live events (`towline.client.events`, `towline watch`)
    "RunEvent",
    # large payloads
    "PayloadStore",
    "FileStorageDriver",
    # the providers' own tools (`Agent(native_tools=[...])`)
    "WebSearch",
    "WebFetch",
    "CodeExecution",
    "FileSearch",
    "HostedMCP",
    "UserLocation",
]
