"""towline: AI agents as durable Temporal workflows.

Model calls and tool executions are activities; capability hooks run as
deterministic workflow code between them; Temporal's history records the
runtime-owned counters exactly as the runtime confirmed them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        DecisionNotApplied,
        DecisionNotDelivered,
        DecisionPending,
        DuplicateToolCallId,
        GuardrailTripped,
        InstructionsFailed,
        InternalError,
        InvalidRunInput,
        MaxStepsExceeded,
        MCPServerUnavailable,
        ModelRequestFailed,
        ModelRetry,
        NondeterministicHook,
        OutputRetriesExhausted,
        PayloadTooLarge,
        RunEnded,
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
    from towline.hooks import HookContext, hook_context
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
    from towline.results import Counters, PartialRun, RunInput, RunResult, RunStatus
    from towline.runtime.deps import current_deps
    from towline.runtime.instructions import InstructionsContext
    from towline.runtime.model_types import Model
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

# `import towline.cli` (or any submodule) runs this file first: importing the whole library
# here cost every command about 0.5 s of start-up before it could even parse its arguments,
# and twice for the commands that re-execute themselves (`towline.runtime.hashseed`). So a
# public name is imported where it lives on first use (PEP 562), with the collector paused
# while its module builds its classes and validators.
_HOMES: dict[str, str] = {
    "Agent": "towline.agent",
    "Capability": "towline.capabilities.base",
    "Middleware": "towline.capabilities.base",
    "ModelCallRequest": "towline.capabilities.state",
    "ModelRequestState": "towline.capabilities.state",
    "EncryptionCodec": "towline.encryption.codec",
    "KeyProvider": "towline.encryption.codec",
    "Cancelled": "towline.errors",
    "CapabilityViolation": "towline.errors",
    "ConfigurationError": "towline.errors",
    "ContentBlocked": "towline.errors",
    "ContentFiltered": "towline.errors",
    "DuplicateToolCallId": "towline.errors",
    "DecisionNotApplied": "towline.errors",
    "DecisionNotDelivered": "towline.errors",
    "DecisionPending": "towline.errors",
    "GuardrailTripped": "towline.errors",
    "InstructionsFailed": "towline.errors",
    "InternalError": "towline.errors",
    "InstructionsContext": "towline.runtime.instructions",
    "current_deps": "towline.runtime.deps",
    "InvalidRunInput": "towline.errors",
    "MaxStepsExceeded": "towline.errors",
    "MCPServerUnavailable": "towline.errors",
    "ModelRequestFailed": "towline.errors",
    "ModelRetry": "towline.errors",
    "NondeterministicHook": "towline.errors",
    "OutputRetriesExhausted": "towline.errors",
    "PayloadTooLarge": "towline.errors",
    "RunError": "towline.errors",
    "RunEnded": "towline.errors",
    "RunFailure": "towline.errors",
    "ToolCallIdentityChanged": "towline.errors",
    "ToolDenied": "towline.errors",
    "ToolError": "towline.errors",
    "ToolResponded": "towline.errors",
    "ToolRetriesExhausted": "towline.errors",
    "TowlineError": "towline.errors",
    "UncertainToolEffect": "towline.errors",
    "UnknownAgent": "towline.errors",
    "UsageLimitExceeded": "towline.errors",
    "RunEvent": "towline.events",
    "HookContext": "towline.hooks",
    "hook_context": "towline.hooks",
    "MCPServer": "towline.mcp",
    "BinaryContent": "towline.messages",
    "DocumentUrl": "towline.messages",
    "ImageUrl": "towline.messages",
    "Message": "towline.messages",
    "ModelRequest": "towline.messages",
    "ModelResponse": "towline.messages",
    "NativeToolCallPart": "towline.messages",
    "NativeToolReturnPart": "towline.messages",
    "Remove": "towline.messages",
    "RemoveAll": "towline.messages",
    "RetryPart": "towline.messages",
    "SystemPart": "towline.messages",
    "TextPart": "towline.messages",
    "ThinkingPart": "towline.messages",
    "ToolCallPart": "towline.messages",
    "ToolReturnPart": "towline.messages",
    "Usage": "towline.messages",
    "UserPart": "towline.messages",
    "CodeExecution": "towline.native_tools",
    "FileSearch": "towline.native_tools",
    "HostedMCP": "towline.native_tools",
    "UserLocation": "towline.native_tools",
    "WebFetch": "towline.native_tools",
    "WebSearch": "towline.native_tools",
    "Limits": "towline.options",
    "ModelSettings": "towline.options",
    "Counters": "towline.results",
    "PartialRun": "towline.results",
    "RunInput": "towline.results",
    "RunResult": "towline.results",
    "RunStatus": "towline.results",
    "TowlinePlugin": "towline.runtime.plugin",
    "Model": "towline.runtime.model_types",
    "FileStorageDriver": "towline.storage.payload_store",
    "PayloadStore": "towline.storage.payload_store",
    "Tool": "towline.tools",
    "ToolCall": "towline.tools",
    "ToolContext": "towline.tools",
    "ToolDefinition": "towline.tools",
    "ToolResult": "towline.tools",
    "ToolReturn": "towline.tools",
    "tool": "towline.tools",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'towline' has no attribute {name!r}")
    from importlib import import_module

    from towline.runtime.heap import paused_gc

    with paused_gc():
        value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Agent",
    "Tool",
    "tool",
    "Capability",
    "Middleware",
    "RunInput",
    "RunResult",
    "RunError",
    "RunEnded",
    "DecisionNotApplied",
    "DecisionPending",
    "DecisionNotDelivered",
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
    "RunStatus",
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
    # run failure reasons (`RunError.reason` is the class name; `towline.client.run` raises
    # a failed run's error as its class too, so `except MaxStepsExceeded` catches it)
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
    "InstructionsFailed",
    "InternalError",
    "MCPServerUnavailable",
    # the run's context and the worker's dependencies (docs/agents-and-tools.md)
    "InstructionsContext",
    "current_deps",
    # data protection
    "EncryptionCodec",
    "KeyProvider",
    # live events (`towline.client.events`, `towline watch`)
    "RunEvent",
    # what capability hook code may do in its run (docs/hook-code.md)
    "HookContext",
    "hook_context",
    # the interface every model implements (a guard model given as an object)
    "Model",
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
