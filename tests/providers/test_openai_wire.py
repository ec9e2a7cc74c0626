"""The OpenAI mappings' pure parts, without a run: thinking settings to efforts, media to
each API's parts (or the error naming a type it cannot take), Chat servers' thinking, thinking
of another family, and the fields Ollama's endpoint is sent (a direct call to the fake)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from fake_server import FakeProvider, Reply
from openai_replies import completion

from towline import ModelSettings
from towline.activities.providers.ollama import OllamaModel
from towline.activities.providers.openai_chat import parse_response
from towline.activities.providers.openai_media import chat_part, responses_part
from towline.activities.providers.openai_options import reasoning_effort
from towline.activities.providers.openai_responses import input_items
from towline.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    Message,
    ModelRequest,
    ModelResponse,
    ThinkingPart,
    ToolCallPart,
    UserPart,
)
from towline.models import ModelHTTPError, ModelInfo

PDF = b"%PDF-1.7\n" + b"%" * 24

def test_thinking_settings_map_to_efforts() -> None:
    assert [reasoning_effort(t) for t in (None, False, True, "minimal", "high")] == [
        None, "none", "medium", "minimal", "high"]
    assert [reasoning_effort(b) for b in (1, 1024, 2800, 3000, 14000, 15000, 100_000)] == [
        "low", "low", "low", "medium", "medium", "high", "high"]
    ollama = OllamaModel("gpt-oss:20b")
    assert (ollama.effort("minimal"), ollama.effort("high")) == ("low", "high")


def test_media_map_to_each_api_or_fail_naming_their_type() -> None:
    wav = BinaryContent(data=b"RIFF....WAVE", media_type="audio/wav")
    assert chat_part(wav, "a prompt") == {"type": "input_audio",
                                          "input_audio": {"data": wav.base64, "format": "wav"}}
    docx = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    sheet = BinaryContent(data=b"PK\x03\x04", media_type=docx)
    assert responses_part(sheet, "a prompt") == {
        "type": "input_file", "filename": f"{_hash(sheet.data)}.docx", "file_data": sheet.data_url}
    inline_pdf = DocumentUrl(url=BinaryContent(data=PDF, media_type="application/pdf").data_url)
    assert chat_part(inline_pdf, "a prompt")["type"] == "file"  # a data: URL is bytes already
    for build, part in ((chat_part, sheet), (chat_part, ImageUrl(url="https://x.test/a.svg")),
                        (responses_part, wav)):
        with pytest.raises(ModelHTTPError) as info:
            build(part, "a prompt")
        assert info.value.status == 400 and (part.media_type or "image/svg+xml") in str(info.value)


def test_chat_servers_thinking_becomes_a_thinking_part() -> None:
    for field in ("reasoning_content", "reasoning"):  # vLLM and DeepSeek; Ollama
        data = completion("4")
        data["choices"][0]["message"][field] = "Adding."
        response = parse_response(data, ModelInfo(), "m")
        assert response.parts[0] == ThinkingPart(content="Adding.", provider="openai")
        assert response.text == "4"


def test_thinking_of_another_family_never_reaches_the_responses_api() -> None:
    call = ToolCallPart(tool_name="add", args={"a": 1}, tool_call_id="c1",
                        metadata={"openai_item_id": "fc_c1"})
    history: list[Message] = [
        ModelRequest(parts=[UserPart(content="hi")]),
        ModelResponse(parts=[ThinkingPart(content="hmm", signature="sig", provider="anthropic",
                                          id="rs_x"), call]),
    ]
    assert [i.get("type") for i in input_items(history)] == [None, "function_call"]


async def test_ollama_sends_only_the_fields_it_takes(provider: FakeProvider) -> None:
    provider.script(Reply(completion("hi")))
    model = OllamaModel("gpt-oss:20b", base_url=f"{provider.url}/v1")
    info = ModelInfo(settings=ModelSettings(thinking="minimal", max_tokens=50), agent="a")
    response = await asyncio.wait_for(
        model.request([ModelRequest(parts=[UserPart(content="hi")])], info), 30)
    assert response.text == "hi"
    [body] = provider.bodies()
    assert (body["reasoning_effort"], body["max_tokens"]) == ("low", 50)
    assert "prompt_cache_key" not in body and "max_completion_tokens" not in body


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]
