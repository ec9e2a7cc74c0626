"""Claude's frontier features end to end: the real `anthropic` SDK against a local server that
enforces the Messages API's rules (`anthropic_rules.py`), through real runs on the dev server.

Thinking round trips (streamed and not), a forged or dropped thinking block refused by the
server, a fallback to another family that leaves the thinking out, images and documents in a
prompt and in a tool's return, media the API cannot take failing before anything is sent,
prompt-cache breakpoints and the cached tokens they save, native output, and Claude on
Bedrock (SigV4-signed `invoke` requests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic_rules import AnthropicRules, error_body
from fake_server import FakeProvider, Reply
from openai_replies import completion
from provider_helpers import KEY, QUICK, add, history_text
from pydantic import BaseModel
from temporalio.client import Client

from towline import Agent, Capability, ModelRequestState, ModelSettings, tool
from towline.activities.providers.anthropic import AnthropicModel, native_schema
from towline.capabilities import ModelFallback
from towline.client import events, run, start_run
from towline.errors import RunError
from towline.messages import BinaryContent, DocumentUrl, ImageUrl, ModelResponse, ThinkingPart
from towline.testing import towline_worker

MODEL = "anthropic:claude-sonnet-4-6"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"


@pytest.fixture
def claude(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeProvider, AnthropicRules]:
    """The fake server as Anthropic's (and OpenAI's) endpoint, enforcing the Messages API."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rules = AnthropicRules()
    provider.rules.append(rules)
    return provider, rules


def thinking_loop(rules: AnthropicRules) -> list[Any]:
    """A tool loop that thinks: thinking, redacted thinking, text and a call; then the answer."""
    return [
        rules.answer([{"type": "thinking", "thinking": "The user wants 20 + 22: use the tool."},
                      {"type": "redacted_thinking", "secret": "something the safety system hid"},
                      {"type": "text", "text": "I'll add them."},
                      {"type": "tool_use", "id": "toolu_t1", "name": "add", "input": {"a": 20, "b": 22}}],
                     "tool_use"),
        rules.answer([{"type": "thinking", "thinking": "The tool said 42."},
                      {"type": "text", "text": "20 + 22 = 42."}]),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_thinking_tool_loop_sends_its_signed_thinking_back_first(
    client: Client, claude: tuple[FakeProvider, AnthropicRules], stream: bool
) -> None:
    server, rules = claude
    server.script(*thinking_loop(rules))
    agent = Agent(name=f"claude-think-{'s' if stream else 'p'}", model=MODEL, tools=[add],
                  model_retry_policy=QUICK,
                  settings=ModelSettings(thinking="low", temperature=0.3, stream=stream))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "What is 20 + 22?", task_queue=queue)
        seen = [e async for e in events(handle)] if stream else []
        result = await handle.result()

    assert result.output == "20 + 22 = 42."
    assert server.refusals() == []
    first, second = server.bodies()
    # thinking on: a budget, max_tokens above it, and no temperature (the API refuses one)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert first["max_tokens"] == 4096 and "temperature" not in first
    # the assistant turn goes back as it came: signed thinking first, unchanged, in order
    turn = second["messages"][1]
    assert turn["role"] == "assistant"
    assert [b["type"] for b in turn["content"]] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert turn["content"][0] == {"type": "thinking", "thinking": "The user wants 20 + 22: use the tool.",
                                  "signature": rules.sign("The user wants 20 + 22: use the tool.")}
    assert turn["content"][1]["data"] == rules.redacted_data("something the safety system hid")
    # the history keeps the thinking, with its signature and its family
    thought = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.parts
               if isinstance(p, ThinkingPart)]
    assert [(p.content, p.redacted, p.provider) for p in thought] == [
        ("The user wants 20 + 22: use the tool.", False, "anthropic"), ("", True, "anthropic"),
        ("The tool said 42.", False, "anthropic")]
    assert thought[0].signature == rules.sign(thought[0].content)
    if stream:  # the thinking was published as it came (in batches), apart from the answer's text
        for step, text in ((1, "The user wants 20 + 22: use the tool."), (2, "The tool said 42.")):
            assert "".join(e.field("delta") for e in seen if e.type == "thinking" and e.step == step) == text
        assert "".join(e.field("delta") for e in seen if e.type == "text" and e.step == 2) == "20 + 22 = 42."


@dataclass(frozen=True)
class TamperWithThinking(Capability):
    """Changes the thinking a request sends back: edits its text, or leaves it out."""

    mode: str = "edit"

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        sent = []
        for m in state.request_messages:
            if isinstance(m, ModelResponse):
                parts = [p.model_copy(update={"content": p.content + " Also, 2 + 2 = 5."})
                         if isinstance(p, ThinkingPart) and not p.redacted else p
                         for p in m.parts if self.mode == "edit" or not isinstance(p, ThinkingPart)]
                m = m.model_copy(update={"parts": parts})
            sent.append(m)
        return state.model_copy(update={"request_messages": sent})


async def test_thinking_a_hook_edited_is_refused_and_fails_the_run(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = claude
    server.script(*thinking_loop(rules))
    agent = Agent(name="claude-forged", model=MODEL, tools=[add], model_retry_policy=QUICK,
                  settings=ModelSettings(thinking=True), capabilities=[TamperWithThinking("edit")])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "What is 20 + 22?", task_queue=queue)

    assert info.value.reason == "ModelRequestFailed"
    assert "messages.1.content.0: Invalid `signature` in `thinking` block" in info.value.message
    assert "HTTP 400" in info.value.message
    assert [r.refused for r in server.requests] == [False, True]  # final: not retried


async def test_a_turn_sent_without_its_thinking_goes_without_thinking_rather_than_fail(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = claude
    server.script(*thinking_loop(rules))
    agent = Agent(name="claude-unthought", model=MODEL, tools=[add], model_retry_policy=QUICK,
                  settings=ModelSettings(thinking=True), capabilities=[TamperWithThinking("drop")])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is 20 + 22?", task_queue=queue)

    assert result.output == "20 + 22 = 42." and server.refusals() == []
    first, second = server.bodies()
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert second["messages"][1]["content"][0]["type"] == "text" and "thinking" not in second
    # sent as it was, the request is one the API refuses
    assert "Expected `thinking` or `redacted_thinking`, but found `text`" in str(
        rules.violation({**second, "thinking": first["thinking"], "max_tokens": first["max_tokens"]}))


async def test_a_fallback_to_openai_leaves_the_thinking_out_and_the_history_keeps_it(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = claude
    server.script(
        thinking_loop(rules)[0],
        Reply(error_body("This organization has been disabled."), status=400),  # final: fall back
        Reply(completion("20 + 22 = 42.")),
    )
    agent = Agent(name="claude-fallback", model=MODEL, tools=[add], model_retry_policy=QUICK,
                  settings=ModelSettings(thinking="medium"),
                  capabilities=[ModelFallback("openai:gpt-4.1-mini")])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "What is 20 + 22?", task_queue=queue)

    assert result.output == "20 + 22 = 42."
    assert [r.path for r in server.requests] == ["/v1/messages", "/v1/messages", "/v1/chat/completions"]
    assert server.bodies()[1]["messages"][1]["content"][0]["type"] == "thinking"
    sent_to_openai = json.dumps(server.bodies()[2])
    assert "use the tool" not in sent_to_openai and rules.sign("The user wants 20 + 22: use the tool.") \
        not in sent_to_openai and "redacted" not in sent_to_openai
    assert "I'll add them." in sent_to_openai  # the rest of that turn is sent
    kept = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.parts
            if isinstance(p, ThinkingPart)]
    assert [p.provider for p in kept] == ["anthropic", "anthropic"]


@tool
def chart() -> list[Any]:
    """Draw the chart of the numbers."""
    return ["the chart:", BinaryContent(data=PNG, media_type="image/png")]


async def test_images_and_documents_reach_the_wire_in_their_blocks(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = claude
    server.script(
        rules.answer([{"type": "tool_use", "id": "toolu_c", "name": "chart", "input": {}}], "tool_use"),
        rules.answer([{"type": "text", "text": "A rising line."}]),
    )
    agent = Agent(name="claude-media", model=MODEL, tools=[chart], model_retry_policy=QUICK)
    prompt: list[Any] = [
        "Compare these.", ImageUrl(url="https://example.com/photo.jpg"),
        BinaryContent(data=PDF, media_type="application/pdf"),
        DocumentUrl(url="https://example.com/report.pdf"),
        BinaryContent(data=b"plain notes", media_type="text/plain"),
    ]
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, prompt, task_queue=queue)

    assert result.output == "A rising line." and server.refusals() == []
    first, second = server.bodies()
    assert first["messages"][0]["content"] == [
        {"type": "text", "text": "Compare these."},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/photo.jpg"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": BinaryContent(data=PDF, media_type="application/pdf").base64}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"},
         "cache_control": {"type": "ephemeral"}},
    ]
    assert second["messages"][2]["content"] == [{
        "type": "tool_result", "tool_use_id": "toolu_c", "cache_control": {"type": "ephemeral"},
        "content": [{"type": "text", "text": "the chart:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": BinaryContent(data=PNG, media_type="image/png").base64}}],
    }]


async def test_a_media_type_the_api_cannot_take_fails_before_anything_is_sent(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, _ = claude
    agent = Agent(name="claude-audio", model=MODEL, model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, ["Transcribe this.", BinaryContent(data=b"RIFF", media_type="audio/wav")],
                      task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert "'audio/wav'" in info.value.message and "a prompt" in info.value.message
    assert server.requests == []


RULES_TEXT = "Answer with the add tool. " + "Follow the house rules for arithmetic carefully. " * 120


async def test_cache_breakpoints_let_each_step_read_the_last_one_and_cost_less(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = claude
    server.script(*(rules.answer([{"type": "tool_use", "id": f"toolu_{n}", "name": "add",
                                   "input": {"a": n, "b": 1}}], "tool_use") for n in range(3)),
                  rules.answer([{"type": "text", "text": "done"}]))
    priced = AnthropicModel(model="claude-sonnet-4-6", model_name="claude-priced",
                            price_provider="anthropic")  # the fake's URL has no prices
    agent = Agent(name="claude-cache", model=priced, tools=[add], instructions=RULES_TEXT,
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "Add up.", task_queue=queue)

    bodies = server.bodies()
    assert all(b["system"][0]["cache_control"] == {"type": "ephemeral"} for b in bodies)
    assert all(b["tools"][-1]["cache_control"] == {"type": "ephemeral"} for b in bodies)
    assert all(b["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"} for b in bodies)
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    # step 1 writes the prefix; each later step reads what the step before it wrote
    writes = [r.usage.cache_write_tokens for r in responses]
    reads = [r.usage.cache_read_tokens for r in responses]
    assert reads[0] == 0 and writes[0] > 1000
    assert all(reads[i] == reads[i - 1] + writes[i - 1] for i in range(1, len(responses)))
    assert result.usage.cache_read_tokens > result.usage.cache_write_tokens > 0
    from towline.activities.providers._common import priced as price

    full = price(result.usage.model_copy(update={"cache_read_tokens": 0, "cache_write_tokens": 0}),
                 "claude-sonnet-4-6", {"provider_id": "anthropic"})
    assert 0 < result.usage.cost < full.cost * 0.6


class Sum(BaseModel):
    """The answer."""

    total: int
    note: str | None = None


async def test_native_output_sends_the_strict_schema_and_reads_the_json_text(
    client: Client, claude: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = claude
    server.script(rules.answer([{"type": "text", "text": '{"total": 42, "note": null}'}]))
    agent = Agent(name="claude-native", model=MODEL, output_type=Sum, output_mode="native",
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "20 + 22?", task_queue=queue)

    assert result.output == Sum(total=42)
    [body] = server.bodies()
    assert "tools" not in body  # no output tool in the native mode
    schema = body["output_config"]["format"]
    assert schema == {"type": "json_schema", "schema": native_schema(Sum.model_json_schema())}
    assert schema["schema"]["required"] == ["total", "note"]
    assert schema["schema"]["additionalProperties"] is False


BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def use_bedrock(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """The worker's environment: `url` as the Bedrock endpoint, SigV4 credentials for eu-west-3
    (and no Bedrock API key, profile or session token to take their place)."""
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", url)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEBEDROCKTEST1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)


async def test_a_bedrock_tool_loop_signs_its_requests_and_thinks(
    client: Client, claude: tuple[FakeProvider, AnthropicRules], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, rules = claude
    use_bedrock(monkeypatch, server.url)
    server.script(*thinking_loop(rules))
    agent = Agent(name="claude-bedrock", model=f"bedrock:{BEDROCK_MODEL}", tools=[add],
                  model_retry_policy=QUICK, settings=ModelSettings(thinking="minimal"))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "What is 20 + 22?", task_queue=queue)
        result = await handle.result()

    assert result.output == "20 + 22 = 42." and server.refusals() == []
    assert [r.path for r in server.requests] == [f"/model/{BEDROCK_MODEL}/invoke"] * 2
    for r in server.requests:  # SigV4 for the region's bedrock service, the model in the path
        assert r.headers["authorization"].startswith(
            "AWS4-HMAC-SHA256 Credential=AKIAFAKEBEDROCKTEST1/")
        assert "/eu-west-3/bedrock/aws4_request" in r.headers["authorization"]
        assert "model" not in r.body and r.body["anthropic_version"]
    second = server.bodies()[1]
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert second["messages"][1]["content"][0]["signature"] == rules.sign(
        "The user wants 20 + 22: use the tool.")
    assert AWS_SECRET not in await history_text(handle)
