"""The public names the docs promise are importable where they say they are."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import towline
import towline.capabilities

DESIGN_NAMES = {
    "towline": [
        "Agent", "Tool", "tool", "Capability", "Middleware", "RunInput", "RunResult", "RunError",
        "Usage", "ModelSettings", "Limits", "ToolCall", "ToolReturn", "ToolContext",
        "ModelRequestState", "RemoveAll", "Remove", "TowlinePlugin",
    ],
    "towline.models": ["TestModel", "FunctionModel"],
    "towline.client": ["start_run", "run", "events"],
    "towline.events": ["RunEvent", "EVENTS_TOPIC", "EVENT_TYPES"],
    "towline.capabilities": [
        "Capability", "Middleware", "run_before_model_request", "run_after_model_request",
        "run_before_tool_execute", "run_after_tool_execute",
    ],
    "towline.runtime.ledger": ["counters_from_history", "RunCounters"],
    "towline.workflows": ["AgentRun", "call_model", "current_run"],
    "towline.mcp": ["MCPServer", "MCPTool", "MCPToolSpec"],
}

FAILURE_REASONS = [
    "MaxStepsExceeded", "ToolRetriesExhausted", "OutputRetriesExhausted", "UsageLimitExceeded",
    "CapabilityViolation", "NondeterministicHook", "ToolCallIdentityChanged", "DuplicateToolCallId",
    "UncertainToolEffect", "ModelRequestFailed", "PayloadTooLarge", "ContentBlocked", "ContentFiltered",
    "Cancelled", "UnknownAgent", "InvalidRunInput", "InternalError",
]


@pytest.mark.parametrize("module", [towline, towline.capabilities], ids=lambda m: m.__name__)
def test_every_exported_name_exists(module: ModuleType) -> None:
    exported: list[str] = list(vars(module)["__all__"])
    assert len(exported) == len(set(exported)), "duplicates in __all__"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []


def test_star_import_works() -> None:
    namespace: dict[str, object] = {}
    exec("from towline import *", namespace)  # noqa: S102 - the import itself is under test
    exec("from towline.capabilities import *", namespace)  # noqa: S102
    assert set(towline.__all__) | set(towline.capabilities.__all__) <= set(namespace)


@pytest.mark.parametrize("module_name", list(DESIGN_NAMES))
def test_design_names_are_importable(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = [name for name in DESIGN_NAMES[module_name] if not hasattr(module, name)]
    assert missing == []


def test_design_names_are_exported_from_towline() -> None:
    assert set(DESIGN_NAMES["towline"]) <= set(towline.__all__)


def test_same_objects_everywhere() -> None:
    from towline.capabilities import Capability, Middleware
    from towline.messages import Remove, RemoveAll, Usage
    from towline.runtime.plugin import TowlinePlugin

    assert towline.Capability is Capability and towline.Middleware is Middleware
    assert (towline.Usage, towline.Remove, towline.RemoveAll) == (Usage, Remove, RemoveAll)
    assert towline.TowlinePlugin is TowlinePlugin


def test_failure_reasons_are_run_failures() -> None:
    errors = importlib.import_module("towline.errors")
    for reason in FAILURE_REASONS:
        cls = getattr(errors, reason)
        assert getattr(towline, reason) is cls, f"from towline import {reason}"
        assert issubclass(cls, towline.RunFailure), reason
        assert cls in errors.FAILURE_TYPES
        failure = cls("message")
        assert failure.type == reason and failure.non_retryable


def test_design_signatures() -> None:
    agent = towline.Agent(name="api-check")
    assert (agent.model_name, agent.instructions, agent.tools, agent.capabilities) == (
        "test", None, (), ())
    assert agent.output_type is str
    limits = towline.Limits()
    assert (limits.max_steps, limits.output_retries, limits.tool_calls_limit,
            limits.request_limit, limits.total_tokens_limit) == (50, 1, None, None, None)
    inp = towline.RunInput(agent="a", prompt="p")
    assert (inp.message_history, inp.limits, inp.context) == (None, None, None)
    assert set(towline.RunResult.model_fields) >= {
        "output", "messages", "usage", "counters", "state", "run_id"}
    plugin = towline.TowlinePlugin(agents=[agent], models={})
    assert plugin.agents == [agent]


def test_remove_takes_the_id_positionally() -> None:
    assert towline.Remove("m1") == towline.Remove(id="m1")
    assert towline.Remove("m1").id == "m1"
