"""The OpenAI mappings' pure parts, without a run: thinking settings to efforts, media to
each API's parts (or the error naming a type it cannot take), Chat servers' thinking, thinking
of another family, the fake server's rules refusing what the APIs refuse, and the fields
Ollama's endpoint is sent (a direct call to the fake)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
from fake_server import FakeProvider, Recorded, Reply
from openai_replies import completion
from openai_rules import ResponsesWire, chat_rules

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


def _refusal(wire: ResponsesWire, path: str, body: dict[str, Any]) -> str | None:
    """The message of the first rule (as the fake applies them) that refuses `body`, or None."""
    recorded = Recorded("POST", path, {}, body, 0.0)
    for rule in [*wire.rules(), *chat_rules()]:
        reply = rule(recorded)
        if reply is not None:
            assert reply.status == 400 and reply.body["error"]["type"] == "invalid_request_error"
            return str(reply.body["error"]["message"])
    return None


def test_the_fake_refuses_what_the_chat_api_refuses() -> None:
    wire = ResponsesWire()
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}
    answered = {"role": "tool", "tool_call_id": "c1", "content": "2"}
    prompt = {"role": "user", "content": "1 + 1?"}
    path = "/v1/chat/completions"
    assert _refusal(wire, path, {"messages": [prompt, asked, answered]}) is None
    open_object = {"type": "object", "properties": {"total": {"type": "integer"}}}
    refused: dict[str, dict[str, Any]] = {  # each rule, on a request otherwise accepted
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'":
            {"messages": [prompt, answered]},
        "The following tool_call_ids did not have response messages: c1":
            {"messages": [prompt, asked, {"role": "user", "content": "and?"}]},
        "Invalid value: 'image_url'. Supported values are: 'text'.": {"messages": [prompt, asked, {
            **answered, "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}]},
        "but got unsupported MIME type 'image/bmp'": {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}]}]},
        "Expected a PDF file, but got 'text/plain'": {"messages": [{"role": "user", "content": [
            {"type": "file", "file": {"filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}}]}]},
        "'additionalProperties' is required to be supplied and to be false": {
            "messages": [prompt], "response_format": {"type": "json_schema", "json_schema": {
                "name": "Sum", "schema": open_object, "strict": True}}},
    }
    for expected, body in refused.items():
        assert expected in str(_refusal(wire, path, body)), expected


def test_the_fake_refuses_what_the_responses_api_refuses() -> None:
    wire = ResponsesWire()
    reasoning, call = wire.reasoned("rs_1", ["Use add."], [("c1", "add", "{}")])
    output = {"type": "function_call_output", "call_id": "c1", "output": "2"}
    prompt = {"role": "user", "content": "1 + 1?"}
    path = "/v1/responses"
    assert _refusal(wire, path, {"input": [prompt, reasoning, call, output]}) is None
    open_object = {"type": "object", "properties": {"total": {"type": "integer"}}}
    refused: dict[str, list[Any] | dict[str, Any]] = {  # each rule, on a request otherwise accepted
        "Items are not persisted when `store` is set to false":
            [prompt, {**reasoning, "encrypted_content": None}, call, output],
        "The encrypted content for item rs_1 could not be verified":
            [prompt, {**reasoning, "encrypted_content": wire.seal("rs_2", ["Use add."])}, call, output],
        "Item 'rs_1' of type 'reasoning' was provided without its required following item.":
            [prompt, reasoning, {"role": "assistant", "content": "2"}],
        "Item 'fc_c1' of type 'function_call' was provided without its required 'reasoning' item":
            [prompt, call, output],
        "No tool call found for function call output with call_id c1.": [prompt, output],
        "No tool output found for function call c1.": [prompt, reasoning, call],
        "but got unsupported MIME type 'image/bmp'": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/bmp;base64,Qk0="}]}],
        "Missing required parameter: 'input[0].content[0].filename'.": [{"role": "user", "content": [
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0="}]}],
        "Expected file type to be a supported format, but got 'application/zip'": [
            prompt, reasoning, call, {**output, "output": [
                {"type": "input_file", "filename": "a.zip", "file_data": "data:application/zip;base64,UEs="}]}],
        "Invalid schema for response_format 'Sum'": {"input": [prompt], "text": {"format": {
            "type": "json_schema", "name": "Sum", "schema": open_object, "strict": True}}},
    }
    for expected, change in refused.items():
        body = change if isinstance(change, dict) else {"input": change}
        assert expected in str(_refusal(wire, path, body)), expected


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
