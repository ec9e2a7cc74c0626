"""The Anthropic mapping's pure parts, and the fake server's rules, without a server or a run:
thinking budgets, sampling with thinking, thinking of another family, cache breakpoints, media
blocks and the media refused before sending, native schemas, cache prices, Bedrock's endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic_rules import AnthropicRules, PromptCache
from pydantic import BaseModel, Field

from towline.activities.providers._common import priced
from towline.activities.providers.anthropic import build_request, native_schema, parse_response
from towline.activities.providers.bedrock import BedrockModel
from towline.errors import ConfigurationError
from towline.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
)
from towline.models import ModelHTTPError, ModelInfo
from towline.options import ModelSettings
from towline.tools import ToolDefinition

ADD = ToolDefinition(name="add", description="Add.", parameters_json_schema={
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
    "additionalProperties": False})


def loop(*thinking: ThinkingPart) -> list[Message]:
    """A prompt, an assistant turn (thinking, text, a call) and its tool's return."""
    return [
        ModelRequest(parts=[SystemPart(content="Be brief."), UserPart(content="1 + 1?")]),
        ModelResponse(parts=[*thinking, TextPart(content="Adding."),
                             ToolCallPart(tool_name="add", args={"a": 1}, tool_call_id="t1")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="add", tool_call_id="t1", content=2)]),
    ]


def body(messages: list[Message], **settings: Any) -> dict[str, Any]:
    sent, extra = build_request("claude-sonnet-4-6", messages, ModelInfo(
        tools=[ADD], settings=ModelSettings(**settings)))
    return {**sent, **extra}


@pytest.mark.parametrize(("thinking", "max_tokens", "budget", "sent_max"), [
    (None, None, None, 4096), (False, None, None, 4096), (True, None, 8192, 12288),
    ("minimal", None, 1024, 4096), ("low", None, 2048, 4096), ("medium", 9000, 8192, 9000),
    ("high", None, 24576, 28672), (500, None, 1024, 4096), (3000, 2000, 3000, 7096),
])
def test_thinking_is_a_budget_below_max_tokens(
    thinking: Any, max_tokens: int | None, budget: int | None, sent_max: int
) -> None:
    rules = AnthropicRules()
    signed = ThinkingPart(content="t", signature=rules.sign("t"), provider="anthropic")
    sent = body(loop(signed), thinking=thinking, max_tokens=max_tokens)
    assert sent.get("thinking") == (None if budget is None else {"type": "enabled", "budget_tokens": budget})
    assert sent["max_tokens"] == sent_max
    assert rules.violation(sent) is None


def test_sampling_the_api_refuses_with_thinking_is_left_out() -> None:
    signed = loop(ThinkingPart(content="t", signature="s", provider="anthropic"))
    plain = body(signed, temperature=0.2, top_p=0.5)
    assert (plain["temperature"], plain["top_p"]) == (0.2, 0.5)
    thinking = body(signed, thinking=True, temperature=0.2, top_p=0.5)
    assert "temperature" not in thinking and "top_p" not in thinking
    kept = body(signed, thinking=True, temperature=1, top_p=0.97)
    assert (kept["temperature"], kept["top_p"]) == (1, 0.97)


def test_a_tool_loop_turn_of_another_family_is_answered_without_thinking() -> None:
    theirs = loop(ThinkingPart(content="theirs", signature="enc", provider="openai"))
    assert "thinking" not in body(theirs, thinking="high")  # the API would refuse it
    assert body(theirs[:1], thinking="high")["thinking"]["budget_tokens"] == 24576  # no loop yet
    then = [*theirs, ModelResponse(parts=[TextPart(content="2")]), ModelRequest(parts=[UserPart(content="ok")])]
    assert "thinking" in body(then, thinking="high")  # a new user turn: thinking again


def test_thinking_of_another_family_or_unsigned_is_not_sent_and_the_history_keeps_it() -> None:
    mine = ThinkingPart(content="mine", signature="sig-a", provider="anthropic")
    messages = loop(ThinkingPart(content="theirs", signature="enc", provider="openai", id="rs_1"),
                    ThinkingPart(content="unsigned", provider="anthropic"), mine)
    sent = body(messages)
    assert sent["messages"][1]["content"][0] == {"type": "thinking", "thinking": "mine", "signature": "sig-a"}
    assert [b["type"] for b in sent["messages"][1]["content"]] == ["thinking", "text", "tool_use"]
    assert len(messages[1].parts) == 5  # the history is not touched


def test_cache_breakpoints_by_default_and_none_without_prompt_cache() -> None:
    cached = body(loop(ThinkingPart(content="t", signature="s", provider="anthropic")))
    assert cached["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert cached["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert cached["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in cached["messages"][1]["content"][0]
    assert str(cached).count("cache_control") == 3
    plain = body(loop(), prompt_cache=False)
    assert "cache_control" not in str(plain) and plain["system"] == "Be brief."
    # a conversation that ends on an assistant turn: never a breakpoint on thinking
    ending = [*loop()[:1], ModelResponse(parts=[TextPart(content="a"), ThinkingPart(
        content="t", signature="s", provider="anthropic")])]
    assert body(ending)["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_the_fake_refuses_what_the_api_refuses() -> None:
    rules = AnthropicRules()
    sent = body(loop(ThinkingPart(content="t", signature=rules.sign("t"), provider="anthropic")),
                thinking=True)
    assert rules.violation(sent) is None
    five = {**sent, "tools": [{**ADD.model_dump(), "cache_control": {"type": "ephemeral"}}] * 3}
    assert rules.violation(five) == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    bmp = {**sent, "messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/bmp", "data": "AAAA"}}]}]}
    assert "media_type: Input should be 'image/jpeg'" in str(rules.violation(bmp))
    orphan = {**sent, "messages": sent["messages"][2:]}
    assert "unexpected `tool_use_id` found in `tool_result` blocks: t1" in str(rules.violation(orphan))
    prompt, turn, results = sent["messages"]
    refused: dict[str, dict[str, Any]] = {  # each rule, on a request otherwise accepted
        "budget_tokens: Input should be greater than or equal to 1024": {
            "thinking": {"type": "enabled", "budget_tokens": 500}},
        "`max_tokens` must be greater than `thinking.budget_tokens`": {"max_tokens": 8192},
        "`temperature` may only be set to 1 when thinking is enabled": {"temperature": 0.5},
        "`top_p` must be greater than or equal to 0.95 or unset": {"top_p": 0.9},
        "`top_k` must be unset when thinking is enabled": {"top_k": 5},
        "For 'object' type, 'additionalProperties' must be explicitly set to false": {
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        "messages.0.content.0: Input tag 'tool_use' found": {"messages": [
            {"role": "user", "content": [{"type": "tool_use", "id": "t0", "name": "add", "input": {}}]},
            turn, results]},
        "messages.1.content.0: Invalid `data` in `redacted_thinking` block": {"messages": [
            prompt, {**turn, "content": [{"type": "redacted_thinking", "data": "aGk=.forged"},
                                         *turn["content"][1:]]}, results]},
        "`tool_use` ids were found without `tool_result` blocks immediately after: t1": {"messages": [
            prompt, turn, {"role": "user", "content": [{"type": "text", "text": "go on"}]}]},
    }
    for expected, change in refused.items():
        assert expected in str(rules.violation({**sent, **change})), expected
    # without breakpoints nothing is cached, however often the prompt is sent
    cache, plain = PromptCache(min_tokens=1), body(loop(), prompt_cache=False)
    assert [cache.usage(plain)[1:] for _ in range(2)] == [(0, 0), (0, 0)]
    with_marks = body(loop())
    assert cache.usage(with_marks)[1] == 0 and cache.usage(with_marks)[1] > 0


@pytest.mark.parametrize(("part", "named"), [
    (BinaryContent(data=b"RIFF", media_type="audio/wav"), "'audio/wav'"),
    (BinaryContent(data=b"BM", media_type="image/bmp"), "'image/bmp'"),
    (ImageUrl(url="https://example.com/scan.tiff"), "'image/tiff'"),
    (DocumentUrl(url="https://example.com/brief.docx"), "wordprocessingml"),
    (BinaryContent(data=b"\xff\xfe\x00", media_type="text/plain"), "not UTF-8"),
])
def test_media_the_api_cannot_take_is_a_final_error_before_sending(part: Any, named: str) -> None:
    with pytest.raises(ModelHTTPError) as info:
        body([ModelRequest(parts=[UserPart(content=["look", part])])])
    assert info.value.status == 400 and not info.value.retryable and named in info.value.body


def test_media_blocks_in_prompts_and_tool_results() -> None:
    data_url = ImageUrl(url="data:image/gif;base64,R0lGODlh")
    sent = body([
        ModelRequest(parts=[UserPart(content=[data_url])]),
        ModelResponse(parts=[ToolCallPart(tool_name="read", tool_call_id="t1")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="read", tool_call_id="t1", status="failed", content=[
            BinaryContent(data=b"%PDF-1.7", media_type="application/pdf").model_dump(mode="json")])]),
    ])
    assert sent["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"}}]
    result = sent["messages"][2]["content"][0]
    assert result["is_error"] is True
    assert result["content"][0] == {"type": "text", "text": "[failed]"}
    assert result["content"][1]["source"] == {"type": "base64", "media_type": "application/pdf",
                                              "data": "JVBERi0xLjc="}
    assert AnthropicRules().violation(sent) is None


class Answer(BaseModel):
    count: int = Field(ge=0)
    label: str | None = None


def test_native_output_is_a_strict_schema_the_api_accepts() -> None:
    sent, _ = build_request("claude-sonnet-4-6", loop()[:1], ModelInfo(
        output_mode="native", output_schema=Answer.model_json_schema()))
    schema = sent["output_config"]["format"]["schema"]
    assert schema == native_schema(Answer.model_json_schema())
    assert schema["required"] == ["count", "label"] and schema["additionalProperties"] is False
    assert "minimum" not in schema["properties"]["count"]  # unsupported: moved to the description
    assert "minimum: 0" in schema["properties"]["count"]["description"]
    assert AnthropicRules().violation(sent) is None
    assert "output_config" not in build_request("m", loop()[:1], ModelInfo(output_mode="prompted",
                                                output_schema=Answer.model_json_schema()))[0]


def test_thinking_and_redacted_thinking_are_read_in_their_order() -> None:
    response = parse_response({"model": "claude-sonnet-4-6", "stop_reason": "tool_use", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "t", "name": "add", "input": {"a": 1}}],
        "usage": {"input_tokens": 5, "output_tokens": 7}}, ModelInfo(), "m")
    assert [p.part_kind for p in response.parts] == ["thinking", "thinking", "text", "tool_call"]
    assert response.thinking == [ThinkingPart(content="hmm", signature="s1", provider="anthropic"),
                                 ThinkingPart(signature="opaque", redacted=True, provider="anthropic")]
    assert response.usage.reasoning_tokens == 0  # the API does not report it apart


def test_cache_reads_cost_less_and_writes_more_than_uncached_input() -> None:
    by = {"provider_id": "anthropic"}
    plain = priced(Usage(requests=1, input_tokens=20_000, output_tokens=100), "claude-sonnet-4-6", by)
    read = priced(Usage(requests=1, input_tokens=20_000, output_tokens=100, cache_read_tokens=18_000),
                  "claude-sonnet-4-6", by)
    written = priced(Usage(requests=1, input_tokens=20_000, output_tokens=100, cache_write_tokens=18_000),
                     "claude-sonnet-4-6", by)
    assert 0 < read.cost < plain.cost * 0.3 and written.cost > plain.cost
    assert plain.unpriced_requests == read.unpriced_requests == 0


async def test_bedrock_reads_aws_credentials_on_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "ANTHROPIC_BEDROCK_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")  # no profile's region either
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNITTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit-secret-key-0123456789")
    model = BedrockModel(model="anthropic.claude-haiku-4-5-20251001-v1:0")
    assert model.name == "bedrock:anthropic.claude-haiku-4-5-20251001-v1:0"
    endpoint = model.endpoint()
    assert endpoint.scrub("bad key unit-secret-key-0123456789") == "bad key [redacted]"
    with pytest.raises(ConfigurationError, match="AWS_REGION"):
        model.connect()
    assert model.pricing(endpoint) == {"provider_id": "aws"}
