"""The Responses API's built-in tools end to end: the real `openai` SDK against the fake Responses
API (`openai_rules.py`), through a real run on the dev server.

The request carries `web_search`, `code_interpreter`, `file_search` and `mcp` as the API names
them (with the `include` values that bring their results back); the answer's
`web_search_call`, `code_interpreter_call`, `file_search_call`, `mcp_list_tools` and
`mcp_call` items become native tool parts; the next request sends them back as they came,
each after the reasoning item that led to it (the fake refuses a reasoning item without
the item that followed it, and a changed encrypted reasoning); their uses are in the ledger,
priced where genai-prices knows the price.
"""

from __future__ import annotations

from typing import Any

import genai_prices
import pytest
from fake_server import FakeProvider
from openai_replies import message_item, responses_answer
from openai_rules import ResponsesWire
from provider_helpers import KEY, QUICK, add, history_text
from temporalio.client import Client

from towline import (
    Agent,
    CodeExecution,
    FileSearch,
    HostedMCP,
    ModelSettings,
    UserLocation,
    WebSearch,
)
from towline.activities.providers.openai_responses import OpenAIResponsesModel
from towline.client import start_run
from towline.messages import ModelResponse, NativeToolCallPart, NativeToolReturnPart, TextPart
from towline.testing import towline_worker

MODEL = OpenAIResponsesModel(model="o4-mini", price_provider="openai")
"""`openai-responses:o4-mini`, priced at OpenAI's prices (the fake's URL has none)."""


@pytest.fixture
def responses(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeProvider, ResponsesWire]:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    wire = ResponsesWire()
    provider.rules += wire.rules()
    return provider, wire


def builtin_output(wire: ResponsesWire) -> list[dict[str, Any]]:
    """What a reasoning model answers after it searched, ran code, searched files and asked an
    MCP server (item shapes as pydantic-ai recorded them: see `openai_rules.py`)."""
    search = {"type": "web_search_call", "id": "ws_01", "status": "completed",
              "action": {"type": "search", "query": "temporal 1.30 release",
                         "sources": [{"type": "url", "url": "https://temporal.io/blog/1-30"}]}}
    code = {"type": "code_interpreter_call", "id": "ci_01", "status": "completed",
            "code": "print(2 ** 8)", "container_id": "cntr_01",
            "outputs": [{"type": "logs", "logs": "256\n"}]}
    files = {"type": "file_search_call", "id": "fs_01", "status": "completed",
             "queries": ["release notes"],
             "results": [{"file_id": "file-1", "filename": "notes.md", "score": 0.91,
                          "text": "1.30 adds workflow streams."}]}
    listing = {"type": "mcp_list_tools", "id": "mcpl_01", "server_label": "docs",
               "tools": [{"name": "ask", "input_schema": {"type": "object"}, "annotations": None}]}
    mcp = {"type": "mcp_call", "id": "mcp_01", "server_label": "docs", "name": "ask",
           "arguments": '{"question":"What is new?"}', "output": "Streams.", "error": None,
           "approval_request_id": None, "status": "completed"}
    answer = message_item("Temporal 1.30 ships streams.")
    answer["content"][0]["annotations"] = [{"type": "url_citation", "url": "https://temporal.io/blog/1-30",
                                            "title": "1.30", "start_index": 0, "end_index": 12}]
    return [wire.reasoning("rs_01", ["Search first."], "ws_01"), search,
            wire.reasoning("rs_02", ["Now compute."], "ci_01"), code, files, listing, mcp, answer,
            *wire.reasoned("rs_03", ["And add."], [("call_add", "add", '{"a": 1, "b": 2}')])]


async def test_builtin_tools_go_back_as_they_came_and_are_priced(
    client: Client, responses: tuple[FakeProvider, ResponsesWire], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, wire = responses
    monkeypatch.setenv("DOCS_MCP_TOKEN", "mcp-secret-51c0ffee")
    output = builtin_output(wire)
    server.script(wire.answer(responses_answer(output)),
                  wire.answer(responses_answer([message_item("3.", "msg_2")])))
    agent = Agent(name="responses-kit", model=MODEL, tools=[add], model_retry_policy=QUICK,
                  settings=ModelSettings(thinking="low"), native_tools=[
                      WebSearch(user_location=UserLocation(country="NL", city="Utrecht"),
                                search_context_size="low", allowed_domains=["temporal.io"]),
                      CodeExecution(file_ids=["file-1"]),
                      FileSearch(vector_store_ids=["vs_1"], max_num_results=5),
                      HostedMCP(url="https://mcp.example.com/mcp", label="docs", allowed_tools=["ask"],
                                description="The docs", token_env="DOCS_MCP_TOKEN")])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "What is new in Temporal?", task_queue=queue)
        result = await handle.result()
        recorded = await history_text(handle)

    assert result.output == "3." and server.refusals() == []
    one, two = server.bodies()
    assert one["tools"][:4] == [
        {"type": "web_search", "user_location": {"type": "approximate", "city": "Utrecht", "country": "NL"},
         "search_context_size": "low", "filters": {"allowed_domains": ["temporal.io"]}},
        {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file-1"]}},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 5},
        {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com/mcp",
         "require_approval": "never", "allowed_tools": ["ask"], "server_description": "The docs",
         "headers": {"Authorization": "Bearer mcp-secret-51c0ffee"}}]
    assert one["include"] == ["reasoning.encrypted_content", "web_search_call.action.sources",
                              "code_interpreter_call.outputs", "file_search_call.results"]
    assert "mcp-secret-51c0ffee" not in recorded

    # back: every built-in item as it came, each after the reasoning that led to it
    sent = [i for i in two["input"] if i.get("type") != "function_call_output" and i.get("role") != "user"]
    builtins = [i for i in output if i["type"] not in ("message", "function_call", "reasoning")]
    assert [i for i in sent if i.get("type") in {b["type"] for b in builtins}] == builtins
    kinds = [i.get("type") or i.get("role") for i in sent]
    assert kinds == ["reasoning", "web_search_call", "reasoning", "code_interpreter_call",
                     "file_search_call", "mcp_list_tools", "mcp_call", "assistant", "reasoning",
                     "function_call"]

    [response, _] = [m for m in result.messages if isinstance(m, ModelResponse)]
    calls = response.native_tool_calls
    assert [(c.tool_name, c.args) for c, _ in calls] == [
        ("web_search", {"query": "temporal 1.30 release"}), ("code_execution", {"code": "print(2 ** 8)"}),
        ("file_search", {"queries": ["release notes"]}), ("mcp", {"server": "docs", "tool": "list_tools"}),
        ("mcp", {"server": "docs", "tool": "ask", "arguments": {"question": "What is new?"}})]
    assert all(isinstance(c, NativeToolCallPart) and c.provider_data == i and r is not None
               for (c, r), i in zip(calls, builtins, strict=True))
    returns = [r for _, r in calls]
    assert all(isinstance(r, NativeToolReturnPart) for r in returns)
    assert [r.content for r in returns if r is not None][1:3] == [
        {"outputs": [{"type": "logs", "logs": "256\n"}], "container": "cntr_01"},
        [{"filename": "notes.md", "score": 0.91, "text": "1.30 adds workflow streams."}]]
    text = next(p for p in response.parts if isinstance(p, TextPart))
    assert text.citations == output[7]["content"][0]["annotations"]

    # the ledger: searches priced (web at $10/1k, files at $2.5/1k by genai-prices), code and
    # MCP not known: that response counts as not wholly priced
    assert result.usage.native_tool_uses == {"code_execution": 1, "file_search": 1, "mcp": 1,
                                             "web_search": 1}
    first, second = [m.usage for m in result.messages if isinstance(m, ModelResponse)]

    def price(usage: Any, **uses: int) -> float:
        return float(genai_prices.calc_price(genai_prices.Usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, **uses),
            "o4-mini", provider_id="openai").total_price)

    assert result.usage.cost == pytest.approx(price(first, web_searches=1, storage_searches=1)
                                              + price(second))
    assert result.usage.unpriced_requests == 1 and result.counters.unpriced_requests == 1


def test_reasoning_goes_back_with_the_builtin_item_it_led_to(
    responses: tuple[FakeProvider, ResponsesWire],
) -> None:
    """The pairing rule reaches built-in items, through the SDK: a reasoning item that led to a
    web search is refused without it (as the API refuses it) and taken with it."""
    import openai

    server, wire = responses
    reasoning, search = builtin_output(wire)[:2]
    server.script(wire.answer(responses_answer([message_item("ok")])))
    sdk: Any = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    ask = {"model": "o4-mini", "store": False, "include": ["reasoning.encrypted_content"]}
    then = {"role": "user", "content": "And?"}
    with pytest.raises(openai.BadRequestError, match="without its required following item"):
        sdk.responses.create(**ask, input=[{"role": "user", "content": "go"}, reasoning, then])
    answer = sdk.responses.create(**ask, input=[{"role": "user", "content": "go"}, reasoning, search, then])
    assert answer.output_text == "ok"
