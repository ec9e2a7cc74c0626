"""OpenAI's frontier features end to end, through the real `openai` SDK against the fake
provider enforcing the APIs' wire rules (`openai_rules.py`), in real runs on the dev server:
reasoning round trips (Responses, streamed and not), thinking from Chat servers, images and
PDFs in prompts and tool returns, media an API cannot take, native structured output,
`prompt_cache_key` and Azure OpenAI. The mappings' pure parts: `test_openai_wire.py`."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import genai_prices
import openai
import pytest
from fake_server import FakeProvider, Reply
from openai_replies import completion, function_call_item, message_item, responses_answer, tool_call
from openai_rules import ResponsesWire, chat_rules
from provider_helpers import KEY, QUICK, add, history_text
from pydantic import BaseModel
from temporalio.client import Client

from towline import Agent, Capability, ModelRequestState, ModelSettings, tool
from towline.activities.providers.azure import DEFAULT_API_VERSION
from towline.activities.providers.openai_options import cache_key
from towline.client import events, run, start_run
from towline.errors import RunError
from towline.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    Message,
    ModelResponse,
    ThinkingPart,
)
from towline.models import OpenAIResponsesModel
from towline.testing import towline_worker

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.7\n" + b"%" * 24
SERVED = "o4-mini-2025-04-16"
SUMMARY = ["The user wants a sum.", "The add tool does that."]
THOUGHT = "\n\n".join(SUMMARY)


@pytest.fixture
def wire(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> ResponsesWire:
    """OpenAI's endpoint is the fake, enforcing both APIs' wire rules."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rules = ResponsesWire()
    provider.rules += [*rules.rules(), *chat_rules()]
    return rules


def reasoner() -> OpenAIResponsesModel:
    """o4-mini on the Responses API, priced as OpenAI's."""
    return OpenAIResponsesModel("o4-mini", price_provider="openai")


def script_reasoning_loop(provider: FakeProvider, wire: ResponsesWire) -> None:
    """Step 1 reasons and calls add; step 2 answers."""
    first = responses_answer(wire.reasoned("rs_1", SUMMARY, [("call_1", "add", '{"a": 4, "b": 5}')]),
                             input_tokens=60, output_tokens=40, reasoning_tokens=30)
    second = responses_answer([message_item("4 + 5 = 9.")], input_tokens=120, output_tokens=12,
                              reasoning_tokens=4, cached=60)
    provider.script(wire.answer(first), wire.answer(second))


def price(input_tokens: int, output_tokens: int, cached: int = 0) -> Decimal:
    usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                               cache_read_tokens=cached or None)
    return genai_prices.calc_price(usage, SERVED, provider_id="openai").total_price


def shape(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude={"id"}) for m in messages]


async def test_a_responses_reasoning_loop_sends_its_reasoning_back(
    client: Client, provider: FakeProvider, wire: ResponsesWire
) -> None:
    agent = Agent(name="frontier-reasoning", model=reasoner(), tools=[add], model_retry_policy=QUICK,
                  settings=ModelSettings(thinking="high"))
    async with towline_worker(client, [agent]) as (tc, queue):
        script_reasoning_loop(provider, wire)
        plain_handle = await start_run(tc, agent, "What is 4 + 5?", task_queue=queue)
        plain = await plain_handle.result()
        script_reasoning_loop(provider, wire)
        handle = await start_run(tc, agent, "What is 4 + 5?", task_queue=queue, stream=True)
        seen = [e async for e in events(handle)]
        streamed = await handle.result()

    assert provider.refusals() == []
    assert plain.output == streamed.output == "4 + 5 = 9."
    bodies = provider.bodies()
    for body in bodies:  # every request thinks, statelessly, and asks for the encrypted reasoning
        assert body["reasoning"] == {"effort": "high", "summary": "auto"}
        assert (body["include"], body["store"]) == (["reasoning.encrypted_content"], False)
    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": wire.seal("rs_1", SUMMARY),
                 "summary": [{"type": "summary_text", "text": THOUGHT}]}
    for second in (bodies[1], bodies[3]):  # the reasoning item, right before the call it led to
        assert second["input"][1:] == [
            reasoning,
            {"type": "function_call", "call_id": "call_1", "name": "add",
             "arguments": '{"a": 4, "b": 5}', "id": "fc_call_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "9"},
        ]
    # one prompt_cache_key per run: the same on both of its requests, another for the next run
    assert bodies[0]["prompt_cache_key"] == bodies[1]["prompt_cache_key"] == cache_key(
        agent.name, plain_handle.id)
    assert bodies[2]["prompt_cache_key"] == bodies[3]["prompt_cache_key"] == cache_key(
        agent.name, handle.id)

    first = next(m for m in streamed.messages if isinstance(m, ModelResponse))
    assert first.thinking == [ThinkingPart(content=THOUGHT, signature=wire.seal("rs_1", SUMMARY),
                                           provider="openai", id="rs_1")]
    assert shape(streamed.messages) == shape(plain.messages)
    usage = streamed.usage
    assert (usage.output_tokens, usage.reasoning_tokens, usage.cache_read_tokens) == (52, 34, 60)
    assert usage == plain.usage
    assert Decimal(str(usage.cost)) == pytest.approx(price(60, 40) + price(120, 12, cached=60))
    # streamed: the summary arrived as thinking, apart from the answer's text
    assert "".join(e.field("delta") for e in seen if e.type == "thinking") == THOUGHT
    assert "".join(e.field("delta") for e in seen if e.type == "text") == "4 + 5 = 9."


class DropThinking(Capability):
    """Sends the model its history without the thinking."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        kept = [m.model_copy(update={"parts": [p for p in m.parts if not isinstance(p, ThinkingPart)]})
                if isinstance(m, ModelResponse) else m for m in state.request_messages]
        return state.model_copy(update={"request_messages": kept})


class ForgeThinking(Capability):
    """Changes the thinking's signature."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        def forged(m: Message) -> Message:
            if not isinstance(m, ModelResponse):
                return m
            return m.model_copy(update={"parts": [
                p.model_copy(update={"signature": "e30" + (p.signature or "")[3:]})
                if isinstance(p, ThinkingPart) else p for p in m.parts]})
        return state.model_copy(update={"request_messages": [forged(m) for m in state.request_messages]})


@pytest.mark.parametrize(("hook", "refused"), [
    (DropThinking(), ("Item 'fc_call_1' of type 'function_call' was provided without its "
                      "required 'reasoning' item: 'rs_1'.")),
    (ForgeThinking(), "The encrypted content for item rs_1 could not be verified."),
])
async def test_reasoning_a_hook_dropped_or_changed_is_refused(
    client: Client, provider: FakeProvider, wire: ResponsesWire, hook: Capability, refused: str
) -> None:
    script_reasoning_loop(provider, wire)
    agent = Agent(name=f"frontier-{type(hook).__name__.lower()}", model=reasoner(), tools=[add],
                  capabilities=[hook], settings=ModelSettings(thinking=True),
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "What is 4 + 5?", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert refused in info.value.message
    assert [r.refused for r in provider.requests] == [False, True]  # final: not retried


async def test_chat_thinking_is_read_streamed_and_never_sent_back(
    client: Client, provider: FakeProvider, wire: ResponsesWire
) -> None:
    provider.script(
        Reply(completion(calls=[tool_call("call_t", "add", {"a": 2, "b": 2})],
                         reasoning_content="Two and two: use add.", completion_tokens=30,
                         reasoning_tokens=20)),
        Reply(completion("4", reasoning_content="It said 4.", completion_tokens=9,
                         reasoning_tokens=5)),
    )
    agent = Agent(name="frontier-chat-thinking", model="openai:qwen3-32b", tools=[add],
                  settings=ModelSettings(thinking=2000, stream=True), model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "2 + 2?", task_queue=queue)
        seen = [e async for e in events(handle)]
        result = await handle.result()

    assert result.output == "4" and provider.refusals() == []
    assert [[t.model_dump() for t in m.thinking] for m in result.messages
            if isinstance(m, ModelResponse)] == [
        [ThinkingPart(content="Two and two: use add.", provider="openai").model_dump()],
        [ThinkingPart(content="It said 4.", provider="openai").model_dump()]]
    first, second = provider.bodies()
    assert first["reasoning_effort"] == second["reasoning_effort"] == "low"  # 2000 tokens: low
    assert first["prompt_cache_key"] == second["prompt_cache_key"] == cache_key(agent.name, handle.id)
    assert "Two and two" not in str(second["messages"])  # the chat API has no field for it
    assert (result.usage.output_tokens, result.usage.reasoning_tokens) == (39, 25)
    assert "".join(e.field("delta") for e in seen if e.type == "thinking") == (
        "Two and two: use add.It said 4.")


@tool
def snapshot(name: str) -> list[Any]:
    """Take a snapshot of a chart."""
    return [f"the {name} chart", BinaryContent(data=PNG, media_type="image/png")]


def media_prompt(document: DocumentUrl | BinaryContent) -> list[Any]:
    return ["Compare these.", ImageUrl(url="https://example.com/cat.png"),
            BinaryContent(data=PNG, media_type="image/png"), document]


async def test_images_and_pdfs_reach_the_chat_wire(
    client: Client, provider: FakeProvider, wire: ResponsesWire
) -> None:
    provider.script(Reply(completion(calls=[tool_call("call_s", "snapshot", {"name": "sales"})])),
                    Reply(completion("They match.")))
    agent = Agent(name="frontier-chat-media", model="openai:gpt-4.1-mini", tools=[snapshot],
                  settings=ModelSettings(prompt_cache=False), model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, media_prompt(BinaryContent(data=PDF, media_type="application/pdf")),
                           task_queue=queue)

    assert result.output == "They match." and provider.refusals() == []
    png = BinaryContent(data=PNG, media_type="image/png")
    pdf = BinaryContent(data=PDF, media_type="application/pdf")
    first, second = provider.bodies()
    assert first["messages"][0] == {"role": "user", "content": [
        {"type": "text", "text": "Compare these."},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": png.data_url}},
        {"type": "file", "file": {"filename": f"{_hash(PDF)}.pdf", "file_data": pdf.data_url}},
    ]}
    tool_message, follow_up = second["messages"][2:]
    assert tool_message["role"] == "tool" and tool_message["content"].startswith("the sales chart\n")
    assert "image/png" in tool_message["content"]  # it says what follows
    assert follow_up["role"] == "user"
    assert follow_up["content"][-1] == {"type": "image_url", "image_url": {"url": png.data_url}}
    assert all("prompt_cache_key" not in b for b in provider.bodies())  # prompt_cache=False


async def test_images_and_pdfs_reach_the_responses_wire(
    client: Client, provider: FakeProvider, wire: ResponsesWire
) -> None:
    provider.script(
        Reply(responses_answer([function_call_item("call_s", "snapshot", '{"name": "sales"}')])),
        Reply(responses_answer([message_item("They match.")])))
    agent = Agent(name="frontier-responses-media", model="openai-responses:gpt-4.1-mini",
                  tools=[snapshot], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, media_prompt(DocumentUrl(url="https://example.com/q3.pdf")),
                           task_queue=queue)

    assert result.output == "They match." and provider.refusals() == []
    png = BinaryContent(data=PNG, media_type="image/png")
    first, second = provider.bodies()
    assert first["input"][0] == {"role": "user", "content": [
        {"type": "input_text", "text": "Compare these."},
        {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        {"type": "input_image", "image_url": png.data_url, "detail": "auto"},
        {"type": "input_file", "file_url": "https://example.com/q3.pdf"},
    ]}
    assert "include" not in first and "reasoning" not in first  # no thinking asked for
    assert second["input"][-1] == {"type": "function_call_output", "call_id": "call_s", "output": [
        {"type": "input_text", "text": "the sales chart"},
        {"type": "input_image", "image_url": png.data_url, "detail": "auto"}]}


@pytest.mark.parametrize(("model", "part", "named"), [
    ("openai:gpt-4.1-mini", DocumentUrl(url="https://example.com/q3.pdf"), "application/pdf"),
    ("openai-responses:gpt-4.1-mini", BinaryContent(data=b"RIFF....WAVE", media_type="audio/wav"),
     "audio/wav"),
])
async def test_media_an_api_cannot_take_fails_before_any_request(
    client: Client, provider: FakeProvider, wire: ResponsesWire, model: str,
    part: DocumentUrl | BinaryContent, named: str,
) -> None:
    agent = Agent(name=f"frontier-unsupported-{model.split(':')[0]}", model=model,
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, ["Read this.", part], task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert named in info.value.message
    assert provider.requests == []


class Sum(BaseModel):
    """The answer."""

    total: int
    note: str | None = None


@pytest.mark.parametrize("model", ["openai:gpt-4.1-mini", "openai-responses:gpt-4.1-mini"])
async def test_native_output_sends_the_strict_schema(
    client: Client, provider: FakeProvider, wire: ResponsesWire, model: str
) -> None:
    answer = '{"total": 9, "note": null}'
    chat = model.startswith("openai:")
    provider.script(Reply(completion(answer) if chat else responses_answer([message_item(answer)])))
    agent = Agent(name=f"frontier-native-{model.split(':')[0]}", model=model, output_type=Sum,
                  output_mode="native", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "4 + 5?", task_queue=queue)

    assert result.output == Sum(total=9) and provider.refusals() == []
    [body] = provider.bodies()
    strict = {"name": "Sum", "strict": True, "schema": {
        "description": "The answer.", "title": "Sum", "type": "object",
        "properties": {"total": {"title": "Total", "type": "integer"},
                       "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Note"}},
        "required": ["total", "note"], "additionalProperties": False}}
    if chat:
        assert body["response_format"] == {"type": "json_schema", "json_schema": strict}
    else:
        assert body["text"] == {"format": {"type": "json_schema", **strict}}
    assert "tools" not in body


async def test_the_fake_refuses_a_schema_strict_mode_cannot_take(provider: FakeProvider) -> None:
    provider.rules += chat_rules()
    sdk = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key=KEY, max_retries=0)
    open_object = {"type": "object", "properties": {"total": {"type": "integer"}},
                   "required": ["total"]}
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "Sum", "schema": open_object, "strict": True}})
    assert "'additionalProperties' is required to be supplied and to be false" in str(info.value)
    await sdk.close()


async def test_an_azure_deployment_runs_a_tool_loop(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", provider.url)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    provider.rules += chat_rules()
    provider.script(Reply(completion(calls=[tool_call("call_z", "add", {"a": 1, "b": 2})],
                                     prompt_tokens=100, completion_tokens=10)),
                    Reply(completion("3", prompt_tokens=120, completion_tokens=2)))
    agent = Agent(name="frontier-azure", model="azure:my-gpt", tools=[add], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "1 + 2?", task_queue=queue)
        result = await handle.result()

    assert result.output == "3" and provider.refusals() == []
    assert [r.path for r in provider.requests] == [
        f"/openai/deployments/my-gpt/chat/completions?api-version={DEFAULT_API_VERSION}"] * 2
    assert all(r.headers["api-key"] == KEY for r in provider.requests)
    assert provider.bodies()[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_z",
                                                   "content": "3"}
    served = "gpt-4.1-mini-2025-04-14"  # priced as Azure's, by the model the deployment serves
    expected = sum(genai_prices.calc_price(genai_prices.Usage(input_tokens=i, output_tokens=o),
                                           served, provider_id="azure").total_price
                   for i, o in ((100, 10), (120, 2)))
    assert Decimal(str(result.usage.cost)) == pytest.approx(expected)
    assert KEY not in await history_text(handle) and provider.url not in await history_text(handle)


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]
