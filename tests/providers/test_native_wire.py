"""The native tools' pure mapping, provider by provider: what one family made never goes to
another, citations go back only in their own API's kinds, Anthropic's container is reused,
and the answers a provider has not finished are read as `Suspended`."""

from __future__ import annotations

from typing import Any

from towline.activities.providers.anthropic import anthropic_messages, last_container
from towline.activities.providers.anthropic import parse_response as anthropic_answer
from towline.activities.providers.google import gemini_contents
from towline.activities.providers.openai_responses import (
    background_state,
    failed_background,
    input_items,
)
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    UserPart,
)
from towline.models import ModelInfo

ANTHROPIC_CALL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
ANTHROPIC_RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                    "content": [{"type": "web_search_result", "url": "https://a.example", "title": "A",
                                 "encrypted_content": "EqSEALED"}]}
OPENAI_ITEM = {"type": "web_search_call", "id": "ws_1", "status": "completed",
               "action": {"type": "search", "query": "q"}}
GEMINI_PART = {"executable_code": {"code": "print(1)", "language": "PYTHON"},
               "thought_signature": "c2lnbmVk"}


def history() -> list[Message]:
    """One conversation that used the native tools of three families (and an offline model's)."""
    def both(provider: str, call: dict[str, Any], ret: dict[str, Any] | None) -> list[Any]:
        return [NativeToolCallPart(tool_name="web_search", tool_call_id=f"{provider}-1", provider=provider,
                                   provider_data=call),
                NativeToolReturnPart(tool_name="web_search", tool_call_id=f"{provider}-1", provider=provider,
                                     provider_data=ret or {})]

    return [
        ModelRequest(parts=[UserPart(content="search")]),
        ModelResponse(parts=[*both("anthropic", ANTHROPIC_CALL, ANTHROPIC_RESULT),
                             TextPart(content="A says so.", citations=[
                                 {"type": "web_search_result_location", "url": "https://a.example",
                                  "cited_text": "so", "encrypted_index": "EqIDX"},
                                 {"type": "url_citation", "url": "https://b.example"}])]),
        ModelResponse(parts=[*both("openai", OPENAI_ITEM, None), TextPart(content="B too.")]),
        ModelResponse(parts=[*both("google", GEMINI_PART, None), TextPart(content="C ran code.")]),
        ModelResponse(parts=[*both("offline", {"type": "made_up"}, None), TextPart(content="D.")]),
        ModelRequest(parts=[UserPart(content="and?")]),
    ]


def test_each_family_gets_back_only_its_own_native_parts() -> None:
    _, claude = anthropic_messages(history())
    turn = claude[1]["content"]
    assert [b["type"] for b in turn] == ["server_tool_use", "web_search_tool_result", "text", "text",
                                         "text", "text"]
    assert turn[:2] == [ANTHROPIC_CALL, ANTHROPIC_RESULT]
    # a citation goes back only in the kinds the Messages API has (not a Responses annotation)
    assert turn[2]["citations"] == [{"type": "web_search_result_location", "url": "https://a.example",
                                     "cited_text": "so", "encrypted_index": "EqIDX"}]
    assert "citations" not in turn[3]

    items = input_items(history())
    assert [i for i in items if "type" in i] == [OPENAI_ITEM]

    _, contents = gemini_contents(history())
    parts = [p for c in contents if c["role"] == "model" for p in c["parts"]]
    assert [next(iter(p)) for p in parts] == ["text", "text", "executable_code", "text", "text"]
    assert parts[2]["thought_signature"] == b"signed"  # the SDK's bytes again


def test_a_code_container_is_reused_and_a_paused_turn_read() -> None:
    data = {"id": "msg_1", "model": "claude-sonnet-4-6", "stop_reason": "pause_turn",
            "container": {"id": "container_9", "expires_at": "2026-05-04T11:00:00Z"},
            "content": [{"type": "server_tool_use", "id": "srvtoolu_c", "name": "bash_code_execution",
                         "input": {"command": "ls"}},
                        {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_c",
                         "content": {"type": "bash_code_execution_result", "stdout": "a\n", "stderr": "",
                                     "return_code": 0, "content": []}}],
            "usage": {"input_tokens": 10, "output_tokens": 5}}
    response = anthropic_answer(data, ModelInfo(), "claude-sonnet-4-6")
    assert response.suspended is not None and response.suspended.reason == "pause_turn"
    assert response.finish_reason == "stop"  # what an engine before 4 took it as
    [(call, ret)] = response.native_tool_calls
    assert call.tool_name == "code_execution" and ret is not None
    assert ret.content == {"type": "bash_code_execution_result", "stdout": "a\n", "stderr": "",
                           "return_code": 0, "content": [], "container": "container_9"}
    assert response.usage.native_tool_uses == {"code_execution": 1}
    assert last_container([ModelRequest(parts=[UserPart(content="go")]), response]) == "container_9"


def test_a_background_response_is_read_by_its_status() -> None:
    queued = background_state({"id": "resp_1", "status": "queued"})
    assert queued is not None and (queued.reason, queued.response_id, queued.status) == (
        "background", "resp_1", "queued")
    assert background_state({"id": "resp_1", "status": "completed"}) is None
    failed = failed_background({"status": "failed", "error": {"code": "server_error", "message": "boom"}})
    assert failed is not None and not failed.retryable and "boom (server_error)" in failed.body
    cancelled = failed_background({"status": "cancelled"})
    assert cancelled is not None and "was cancelled" in cancelled.body
    assert failed_background({"status": "incomplete"}) is None  # read as a cut-off answer
