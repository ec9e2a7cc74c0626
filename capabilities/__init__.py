"""Capabilities: the hook base class, middleware, composition helpers and built-ins."""

from .base import Capability, CapabilityLike, JumpTo, Middleware, NextModelCall
from .completion_gate import CompletionGate
from .compose import (
    arun_after_model_request,
    arun_after_tool_execute,
    arun_before_model_request,
    arun_before_tool_execute,
    arun_before_tool_return,
    run_after_model_request,
    run_after_tool_execute,
    run_before_model_request,
    run_before_tool_execute,
    run_before_tool_return,
)
from .context_editing import ContextEditing
from .handoff import Handoff, remove_tool_calls
from .history_window import HistoryWindow
from .input_guardrail import InputGuardrail
from .model_fallback import ModelFallback
from .output_guardrail import OutputGuardrail
from .prompt_injection import PromptInjectionGuard
from .redact_pii import RedactPII
from .state import (
    AgentView,
    ModelCallRequest,
    ModelRequestParams,
    ModelRequestState,
)
from .subagent import Subagent
from .summarization import Summarization
from .todo_list import TodoList
from .tool_approval import Ask, Deny, ToolApproval
from .tool_guardrail import Replace, ToolGuardrail
from .tool_selector import ToolSelector

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
    "run_before_tool_return",
    "run_after_tool_execute",
    "arun_before_model_request",
    "arun_after_model_request",
    "arun_before_tool_execute",
    "arun_before_tool_return",
    "arun_after_tool_execute",
    "ToolSelector",
    "CompletionGate",
    "ModelFallback",
    "ToolApproval",
    "Ask",
    "Deny",
    "Subagent",
    "HistoryWindow",
    "RedactPII",
    "Summarization",
    "ContextEditing",
    "TodoList",
    "InputGuardrail",
    "OutputGuardrail",
    "ToolGuardrail",
    "Replace",
    "PromptInjectionGuard",
    "Handoff",
    "remove_tool_calls",
]
