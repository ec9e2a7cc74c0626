"""Gemini's wire mapping, unit by unit: towline messages to `contents` and `config`, streamed
chunks and answers back, errors, and where a `google:` model sends its requests. Pure
functions, no server (`test_provider_google.py` runs them end to end)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from gemini_server import decoded
from provider_helpers import KEY

from towline.activities.providers._common import Endpoint
from towline.activities.providers.google import (
    GoogleEndpoint,
    gemini_config,
    gemini_contents,
    gemini_error,
    merge_chunks,
    parse_response,
    thinking_config,
)
from towline.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    Message,
    ModelRequest,
    ModelResponse,
    RetryPart,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import GoogleModel, GoogleVertexModel, ModelHTTPError, ModelInfo
from towline.options import ModelSettings

SIG_CALL = "+/+/Z2VtaW5pLXRob3VnaHQtMf77"
SIG_TEXT = "++//Z2VtaW5pLXRob3VnaHQtMr4="
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))

@pytest.mark.parametrize(("thinking", "model", "config"), [
    (None, "gemini-2.5-flash", None),
    (False, "gemini-2.5-flash", {"thinking_budget": 0}),
    (True, "gemini-2.5-flash", {"include_thoughts": True}),
    (3000, "gemini-3-pro-preview", {"include_thoughts": True, "thinking_budget": 3000}),
    ("medium", "gemini-2.5-pro", {"include_thoughts": True, "thinking_budget": 8192}),
    ("low", "gemini-3-pro-preview", {"include_thoughts": True, "thinking_level": "LOW"}),
    ("minimal", "gemini-3.5-flash", {"include_thoughts": True, "thinking_level": "MINIMAL"}),
])
def test_thinking_maps_to_thinking_config(thinking: Any, model: str, config: Any) -> None:
    assert thinking_config(thinking, model) == config


def test_requests_map_to_contents() -> None:
    anthropic_thinking = ThinkingPart(content="mine", signature="c2ln", provider="anthropic")
    messages: list[Message] = [
        ModelRequest(parts=[SystemPart(content="Be brief."), UserPart(content=[
            "Look:", ImageUrl(url="data:image/webp;base64,UklGRg=="),
            ImageUrl(url="gs://bucket/chart.jpg")])]),
        ModelResponse(parts=[anthropic_thinking, ThinkingPart(signature=SIG_CALL, provider="google"),
                             ToolCallPart(tool_name="shot", args={}, tool_call_id="c1"),
                             ToolCallPart(tool_name="read", args={"k": 1}, tool_call_id="c2")]),
        ModelRequest(parts=[
            ToolReturnPart(tool_name="shot", tool_call_id="c1",
                           content=["the screen", BinaryContent(data=PNG, media_type="image/png")]),
            RetryPart(content="k must be a string", tool_name="read", tool_call_id="c2")]),
        ModelRequest(parts=[UserPart(content="And now?"), RetryPart(content="Answer in JSON.")]),
    ]
    system, contents = gemini_contents(messages)
    assert system == "Be brief."
    assert contents[0] == {"role": "user", "parts": [
        {"text": "Look:"}, {"inline_data": {"data": base64.b64decode("UklGRg=="), "mime_type": "image/webp"}},
        {"file_data": {"file_uri": "gs://bucket/chart.jpg", "mime_type": "image/jpeg"}}]}
    assert contents[1] == {"role": "model", "parts": [  # Claude's thinking is not Gemini's
        {"function_call": {"name": "shot", "args": {}, "id": "c1"}, "thought_signature": decoded(SIG_CALL)},
        {"function_call": {"name": "read", "args": {"k": 1}, "id": "c2"}}]}
    # one user turn: both function responses first, then the image the tool returned, then the text
    assert contents[2] == {"role": "user", "parts": [
        {"function_response": {"name": "shot", "id": "c1", "response": {"output": "the screen"}}},
        {"function_response": {"name": "read", "id": "c2",
                               "response": {"error": "k must be a string\nFix this and try again."}}},
        {"inline_data": {"data": PNG, "mime_type": "image/png"}},
        {"text": "And now?"}, {"text": "Answer in JSON.\nFix this and try again."}]}
    assert len(contents) == 3


def test_a_failed_tool_return_is_an_error_response() -> None:
    failed = ModelRequest(parts=[ToolReturnPart(tool_name="t", tool_call_id="c", content="boom",
                                                status="failed")])
    _, [content] = gemini_contents([failed])
    assert content["parts"] == [{"function_response": {"name": "t", "id": "c",
                                                       "response": {"error": "[failed] boom"}}}]


@pytest.mark.parametrize("part", [
    BinaryContent(data=b"GIF89a", media_type="image/gif"),
    DocumentUrl(url="https://example.com/notes.docx"),
    ImageUrl(url="https://example.com/picture"),  # no type given, none guessed
])
def test_media_gemini_cannot_read_is_refused_while_building(part: Any) -> None:
    with pytest.raises(ModelHTTPError) as info:
        gemini_contents([ModelRequest(parts=[UserPart(content=["see", part])])])
    assert info.value.status == 400 and "google: cannot send" in info.value.body


def test_streamed_chunks_gather_into_one_answer() -> None:
    def chunk(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"candidates": [{"content": {"role": "model", "parts": list(parts)}, **extra}]}

    signature = decoded(SIG_TEXT)
    merged = merge_chunks([
        chunk({"text": "Thin", "thought": True}), chunk({"text": "king.", "thought": True}),
        chunk({"text": "Hel"}), chunk({"text": "lo"}), chunk({"text": "", "thought_signature": signature}),
        chunk({"function_call": {"name": "f", "args": {"x": 1}}}),
        {**chunk({"text": "!"}, finish_reason="STOP"), "usage_metadata": {"prompt_token_count": 3}},
    ])
    assert merged["candidates"][0] == {"finish_reason": "STOP", "content": {"role": "model", "parts": [
        {"text": "Thinking.", "thought": True}, {"text": "Hello", "thought_signature": signature},
        {"function_call": {"name": "f", "args": {"x": 1}}}, {"text": "!"}]}}
    response = parse_response(merged, ModelInfo(), "gemini-x")
    assert response.parts == [
        ThinkingPart(content="Thinking.", provider="google"),
        ThinkingPart(signature=SIG_TEXT, provider="google"), TextPart(content="Hello"),
        ToolCallPart(tool_name="f", args={"x": 1}), TextPart(content="!")]
    assert (response.finish_reason, response.usage.input_tokens) == ("tool_calls", 3)


@pytest.mark.parametrize(("data", "finish"), [
    ({"candidates": [{"content": {"parts": [{"text": "cut"}]}, "finish_reason": "MAX_TOKENS"}]}, "length"),
    ({"candidates": [{"finish_reason": "SAFETY"}]}, "content_filter"),
    ({"prompt_feedback": {"block_reason": "PROHIBITED_CONTENT"}}, "content_filter"),
])
def test_finish_reasons(data: dict[str, Any], finish: str) -> None:
    assert parse_response(data, ModelInfo(), "gemini-x").finish_reason == finish


def test_gemini_errors_carry_their_retry_delay_and_overflow() -> None:
    endpoint = Endpoint("http://gemini.internal:9000", "AIzaSy-secret-key")
    quota = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded",
                       "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                    "retryDelay": "37s"}]}}
    assert gemini_error(429, quota, {}, endpoint).retry_after == 37.0
    assert gemini_error(429, quota, {"retry-after": "5"}, endpoint).retry_after == 5.0
    overflow = gemini_error(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                            "The input token count (2000000) exceeds the maximum number of tokens "
                            "allowed (1048576)."}}, None, endpoint)
    assert overflow.context_overflow and not overflow.retryable
    leaky = gemini_error(400, {"error": {"message": "bad key AIzaSy-secret-key at "
                                         "http://gemini.internal:9000"}}, None, endpoint)
    assert "AIzaSy-secret-key" not in leaky.body and "gemini.internal" not in leaky.body


def test_a_signed_thought_goes_back_as_a_signed_thought_and_extra_settings_are_split() -> None:
    history: list[Message] = [
        ModelRequest(parts=[UserPart(content="hi")]),
        ModelResponse(parts=[ThinkingPart(content="Hmm.", signature=SIG_TEXT, provider="google"),
                             TextPart(content="Hello."), ThinkingPart(signature=SIG_CALL, provider="google")]),
        ModelRequest(parts=[UserPart(content="again")]),
    ]
    info = ModelInfo(settings=ModelSettings(extra={"top_k": 4, "cachedContent": "cachedContents/x"}))
    contents, config = gemini_config("gemini-2.5-flash", history, info)
    # the thought keeps its own signature; a signature with no part after it has nothing to ride on
    assert contents[1]["parts"] == [{"text": "Hmm.", "thought": True, "thought_signature": decoded(SIG_TEXT)},
                                    {"text": "Hello."}]
    assert "top_k" not in config  # `extra` is split by the model (it needs the SDK's field names)
    from towline.activities.providers.google import _with_extra  # pyright: ignore[reportPrivateUsage]

    sent = _with_extra(config, info.settings.extra, {"top_k", "temperature"})
    assert sent["top_k"] == 4
    assert sent["http_options"]["extra_body"] == {"cachedContent": "cachedContents/x"}
    assert sent["http_options"]["retry_options"] == {"attempts": 1}  # Temporal retries, not the SDK
    assert sent["automatic_function_calling"] == {"disable": True}


def test_where_a_google_model_sends_its_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
                 "GOOGLE_CLOUD_LOCATION", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    assert GoogleModel("m").endpoint() == GoogleEndpoint(None, "gemini-key")
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)  # the SDK's order: GOOGLE_API_KEY first
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://gemini.local")
    assert GoogleModel("m").endpoint() == GoogleEndpoint("http://gemini.local", KEY)
    # Vertex AI: express mode with the key while no project is set, else the project's ADC
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", "http://vertex.local")
    assert GoogleModel("m").endpoint() == GoogleEndpoint("http://vertex.local", KEY, vertexai=True)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-east5")
    assert GoogleVertexModel("m").endpoint() == GoogleEndpoint(
        "http://vertex.local", None, vertexai=True, project="proj", location="us-east5")
    assert GoogleModel("m", vertexai=True, api_key="explicit").endpoint().api_key == "explicit"
    assert not GoogleModel("m", vertexai=False).endpoint().vertexai
    monkeypatch.delenv("GOOGLE_API_KEY")
    monkeypatch.delenv("GEMINI_API_KEY")
    with pytest.raises(ValueError, match="GEMINI_API_KEY"):
        GoogleModel("m", vertexai=False).endpoint()
