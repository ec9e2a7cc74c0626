"""Issue 41, modules by meaning: one home per concern, and the names users import still work.

- Messages: every type and helper `towline.messages` exports is defined there (the media parts
  and the native tool parts were modules of their own, split off by a line cap).
- Providers: each provider's request mapping, native tools and model are one module.
- Test helpers: the hooks applied to plain values are `towline.testing`'s, and the design
  contract's `towline.capabilities` names are the same functions.
- `ToolCall` / `ToolReturn` are `ToolCallPart` / `ToolReturnPart`: one type each.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

import towline
import towline.capabilities
import towline.messages
import towline.testing

HOOK_HELPERS = [
    "run_before_model_request", "run_after_model_request", "run_before_tool_execute",
    "run_before_tool_return", "run_after_tool_execute", "arun_before_model_request",
    "arun_after_model_request", "arun_before_tool_execute", "arun_before_tool_return",
    "arun_after_tool_execute",
]


def test_every_message_type_is_defined_in_towline_messages() -> None:
    elsewhere = {
        name: obj.__module__ for name in towline.messages.__all__
        if inspect.isclass(obj := getattr(towline.messages, name)) or inspect.isfunction(obj)
        if obj.__module__ != "towline.messages"
    }
    assert elsewhere == {}
    # the media and native parts read back from JSON as before
    response = towline.messages.ModelResponse.model_validate_json(
        '{"parts": [{"part_kind": "native_tool_call", "tool_name": "web_search", '
        '"provider": "anthropic", "args": {"query": "q"}}], '
        '"suspended": {"reason": "pause_turn", "provider": "anthropic"}}')
    assert isinstance(response.parts[0], towline.messages.NativeToolCallPart)
    assert towline.messages.as_media({"kind": "binary", "data": "YWI=", "media_type": "image/png"}
                                     ) == towline.messages.BinaryContent(data=b"ab",
                                                                         media_type="image/png")


@pytest.mark.parametrize(("module", "names"), [
    ("anthropic", ["AnthropicModel", "build_request", "parse_response", "native_request",
                   "server_part", "anthropic_messages", "last_container"]),
    ("google", ["GoogleModel", "gemini_contents", "gemini_config", "parse_response",
                "native_tool_entries", "grounding_parts", "merge_chunks"]),
    ("openai_responses", ["OpenAIResponsesModel", "build_request", "parse_response",
                          "native_tools", "item_parts", "background_state"]),
])
def test_each_provider_is_one_module(module: str, names: list[str]) -> None:
    full = f"towline.activities.providers.{module}"
    provider = importlib.import_module(full)
    assert {name: getattr(provider, name).__module__ for name in names} == dict.fromkeys(names, full)


def test_the_hook_helpers_are_testing_helpers() -> None:
    assert set(HOOK_HELPERS) <= set(towline.testing.__all__)
    for name in HOOK_HELPERS:  # the design contract's names are the same functions
        assert getattr(towline.capabilities, name) is getattr(towline.testing, name)

    class LastOnly(towline.Capability):
        def before_model_request(self, state: Any) -> Any:  # a plain dict here
            return {**state, "request_messages": state["messages"][-1:]}

    assert towline.testing.run_before_model_request([LastOnly], {"messages": [1, 2]}) == {
        "messages": [1, 2], "request_messages": [2]}


def test_tool_call_and_tool_return_are_one_type_each() -> None:
    assert towline.ToolCall is towline.messages.ToolCallPart
    assert towline.ToolReturn is towline.messages.ToolReturnPart
    call = towline.ToolCall(tool_name="add", args={"a": 1}, tool_call_id="c1")
    assert isinstance(call, towline.messages.ToolCallPart)
