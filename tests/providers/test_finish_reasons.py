"""Every finish reason the providers document, read from the installed SDKs themselves.

Each test is parametrized by the values the SDK declares (google-genai's `FinishReason` and
`BlockedReason` enums, the `Literal` types of anthropic's `StopReason`, of Chat Completions'
`finish_reason`, of the Responses API's `status`, `incomplete_details.reason` and
`error.code`), and looks each up in this file's own reading of the providers' docs. A value
a new SDK adds is a new test case that fails until both towline's table and this reading
say what it means. Each answer goes through the SDK's own model (validated and dumped as
the provider module does) and towline's parser; the raw value must survive in
`provider_details`.

What each normalised reason does to a run is tested end to end on real recordings
(`test_recorded_traffic.py`).
"""

from __future__ import annotations

from typing import Any, get_args

import anthropic.types
import pytest
from google.genai import types as genai
from openai.types.chat.chat_completion import ChatCompletion, Choice
from openai.types.responses import Response, ResponseError
from openai.types.responses.response import IncompleteDetails

from towline.activities.providers import anthropic as claude
from towline.activities.providers import google as gemini
from towline.activities.providers import openai_chat, openai_responses
from towline.activities.providers.google import merge_chunks
from towline.runtime.model_types import ModelHTTPError, ModelInfo

INFO = ModelInfo()

GEMINI: dict[str, str] = {
    "FINISH_REASON_UNSPECIFIED": "stop", "STOP": "stop",
    "MAX_TOKENS": "length", "CONTINUATION": "length",
    # filters and policies: the run ends with ContentFiltered
    "SAFETY": "content_filter", "RECITATION": "content_filter", "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter", "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter", "IMAGE_RECITATION": "content_filter",
    "MODEL_ARMOR": "content_filter", "ESCALATION": "content_filter",
    "PUP_LIMITED_DISABLED": "content_filter",
    # Gemini calls the answer itself unusable: the model is told and asked again
    "MALFORMED_FUNCTION_CALL": "error", "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error", "MALFORMED_RESPONSE": "error",
    "MISSING_THOUGHT_SIGNATURE": "error", "NO_IMAGE": "error", "IMAGE_OTHER": "error",
    "OTHER": "error",
}
ANTHROPIC: dict[str, str] = {
    "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
    "max_tokens": "length", "model_context_window_exceeded": "length",
    "refusal": "content_filter",
    "pause_turn": "stop",  # a paused turn: the native-tools continuation sends it back
}
CHAT: dict[str, str] = {
    "stop": "stop", "length": "length", "tool_calls": "tool_calls",
    "function_call": "tool_calls", "content_filter": "content_filter",
}
INCOMPLETE: dict[str, str] = {
    "max_output_tokens": "length", "max_messages": "length", "steered": "length",
    "content_filter": "content_filter",
}
POLICY = {"invalid_prompt", "bio_policy", "misalignment_policy_violation",
          "image_content_policy_violation"}
RETRIED = {"server_error": 500, "rate_limit_exceeded": 429, "vector_store_timeout": 504}


def _literal(annotation: Any) -> list[str]:
    """The strings of a `Literal` type, through `Optional[...]`."""
    found: list[str] = []
    for arg in get_args(annotation):
        found += [arg] if isinstance(arg, str) else _literal(arg)
    return found


# --- Gemini and Vertex AI ----------------------------------------------------------------


def _gemini(body: dict[str, Any]) -> dict[str, Any]:
    """A camelCase answer as the SDK reads it and the provider module dumps it."""
    return genai.GenerateContentResponse.model_validate(body).model_dump(exclude_none=True)


@pytest.mark.parametrize("value", [m.value for m in genai.FinishReason])
def test_every_gemini_finish_reason(value: str) -> None:
    assert value in GEMINI, f"google-genai has a new FinishReason {value!r}: say what it means"
    assert value in gemini.FINISH_REASONS, f"towline does not map {value!r}"
    answer = _gemini({"candidates": [{
        "content": {"role": "model", "parts": [{"text": "partial"}]}, "finishReason": value,
        "finishMessage": f"stopped: {value}"}],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 2}})
    response = gemini.parse_response(answer, INFO, "gemini-x")
    assert response.finish_reason == GEMINI[value]
    assert response.provider_details == {"finish_reason": value,
                                         "finish_message": f"stopped: {value}"}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 2)  # still billed


def test_a_gemini_stop_with_calls_is_tool_calls() -> None:
    answer = _gemini({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "add", "args": {"a": 1}}}]}, "finishReason": "STOP"}]})
    assert gemini.parse_response(answer, INFO, "gemini-x").finish_reason == "tool_calls"


@pytest.mark.parametrize("value", [m.value for m in genai.BlockedReason])
def test_every_gemini_blocked_prompt_reason(value: str) -> None:
    """A blocked prompt has no candidate at all, only `promptFeedback`; streamed too."""
    body = {"promptFeedback": {"blockReason": value, "blockReasonMessage": "blocked"},
            "usageMetadata": {"promptTokenCount": 9}}
    for answer in (_gemini(body), merge_chunks([_gemini(body)])):
        response = gemini.parse_response(answer, INFO, "gemini-x")
        assert response.finish_reason == "content_filter" and response.parts == []
        assert response.provider_details == {"block_reason": value,
                                             "block_reason_message": "blocked"}
        assert response.usage.input_tokens == 9


# --- Anthropic (and Claude on Bedrock) ------------------------------------------------------


@pytest.mark.parametrize("value", _literal(anthropic.types.StopReason))
def test_every_anthropic_stop_reason(value: str) -> None:
    assert value in ANTHROPIC, f"anthropic has a new stop_reason {value!r}: say what it means"
    assert value in claude.STOP_REASONS, f"towline does not map {value!r}"
    message = anthropic.types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "partial"}], "stop_reason": value,
        "stop_sequence": None, "usage": {"input_tokens": 7, "output_tokens": 2}})
    response = claude.parse_response(message.model_dump(mode="json"), INFO, "claude-x")
    assert response.finish_reason == ANTHROPIC[value]
    assert response.provider_details == {"stop_reason": value}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 2)
    assert (value in claude.PAUSED) == (value == "pause_turn")


# --- OpenAI Chat Completions ---------------------------------------------------------------


@pytest.mark.parametrize("value", _literal(Choice.model_fields["finish_reason"].annotation))
def test_every_chat_finish_reason(value: str) -> None:
    assert value in CHAT, f"openai has a new finish_reason {value!r}: say what it means"
    assert value in openai_chat.FINISH_REASONS, f"towline does not map {value!r}"
    completion = ChatCompletion.model_validate({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-x",
        "choices": [{"index": 0, "finish_reason": value, "message": {
            "role": "assistant", "content": "partial", "refusal": None}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})
    response = openai_chat.parse_response(completion.model_dump(mode="json"), INFO, "gpt-x")
    assert response.finish_reason == CHAT[value]
    assert response.provider_details == {"finish_reason": value}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 2)


def test_a_chat_stop_with_calls_is_tool_calls() -> None:
    """A forced `tool_choice` ends a real answer that calls the tool with `stop`."""
    forced = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}
    assert openai_chat.parse_response(forced, INFO, "gpt-x").finish_reason == "tool_calls"


def test_a_chat_refusal_is_filtered_whatever_its_finish_reason() -> None:
    refused = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "refusal": "I can't help with that."}}]}
    response = openai_chat.parse_response(refused, INFO, "gpt-x")
    assert response.finish_reason == "content_filter" and response.text == "I can't help with that."
    assert response.provider_details == {"finish_reason": "stop",
                                         "refusal": "I can't help with that."}


# --- OpenAI Responses API ------------------------------------------------------------------


def _response(status: str, **fields: Any) -> dict[str, Any]:
    body = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-x",
            "status": status, "output": [{"type": "message", "id": "m1", "role": "assistant",
                                          "status": "completed", "content": [
                                              {"type": "output_text", "text": "partial",
                                               "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9,
                      "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}, **fields}
    return Response.model_validate(body).model_dump(mode="json")


@pytest.mark.parametrize("value", _literal(Response.model_fields["status"].annotation))
def test_every_responses_status(value: str) -> None:
    assert value in openai_responses.STATUSES, f"towline does not read status {value!r}"
    if value in ("completed", "incomplete"):
        response = openai_responses.parse_response(_response(value), INFO, "gpt-x")
        assert response.finish_reason == ("stop" if value == "completed" else "length")
        assert response.provider_details["status"] == value
        return
    error = {"error": {"code": "server_error", "message": "boom"}} if value == "failed" else {}
    with pytest.raises(ModelHTTPError) as raised:
        openai_responses.parse_response(_response(value, **error), INFO, "gpt-x")
    # failed: by its code (here retried); cancelled or pending (background only): final
    assert raised.value.retryable == (value == "failed"), value


@pytest.mark.parametrize("value", _literal(IncompleteDetails.model_fields["reason"].annotation))
def test_every_responses_incomplete_reason(value: str) -> None:
    assert value in INCOMPLETE, f"openai has a new incomplete reason {value!r}: say what it means"
    assert value in openai_responses.INCOMPLETE_REASONS, f"towline does not map {value!r}"
    data = _response("incomplete", incomplete_details={"reason": value})
    response = openai_responses.parse_response(data, INFO, "gpt-x")
    assert response.finish_reason == INCOMPLETE[value]
    assert response.provider_details == {"status": "incomplete", "incomplete_reason": value}
    assert response.usage.input_tokens == 7


@pytest.mark.parametrize("value", _literal(ResponseError.model_fields["code"].annotation))
def test_every_responses_error_code(value: str) -> None:
    """A `failed` response: a usage-policy code is a filtered answer (billed); a transient
    one is retried with the status it stands for; any other fails the request for good."""
    data = _response("failed", error={"code": value, "message": f"failed: {value}"})
    if value in POLICY:
        response = openai_responses.parse_response(data, INFO, "gpt-x")
        assert response.finish_reason == "content_filter"
        assert response.provider_details == {"status": "failed", "error_code": value}
        assert response.usage.input_tokens == 7
        return
    with pytest.raises(ModelHTTPError) as raised:
        openai_responses.parse_response(data, INFO, "gpt-x")
    assert raised.value.status == RETRIED.get(value, 400), value
    assert f"failed: {value} ({value})" in raised.value.body


def test_a_responses_refusal_is_filtered() -> None:
    data = _response("completed")
    data["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help with that."}]
    response = openai_responses.parse_response(data, INFO, "gpt-x")
    assert response.finish_reason == "content_filter" and response.text == "I can't help with that."
