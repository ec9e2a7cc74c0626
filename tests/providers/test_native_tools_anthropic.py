"""Claude's server tools end to end: the real `anthropic` SDK against the fake Messages API
(`anthropic_rules.py` and `anthropic_server_tools.py`), through real runs on the dev server.

Each native tool is asked for as the API names it (`web_search_20250305`,
`web_fetch_20250910`, `code_execution_20250825`, the MCP connector's `mcp_servers` with its
beta), its blocks are recorded as native tool parts (the encrypted content as it came), the
next request sends them back unchanged, and their uses are in the ledger, priced where
genai-prices knows the price. A `pause_turn` is continued as more requests of the same step;
a tampered result, a dropped one and a changed continuation are refused as the API refuses
them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anthropic
import genai_prices
import pytest
from anthropic_replies import message
from anthropic_rules import AnthropicRules
from anthropic_server_tools import ServerTools
from fake_server import FakeProvider
from provider_helpers import KEY, QUICK, add, history_text
from temporalio.client import Client

from towline import (
    Agent,
    Capability,
    CodeExecution,
    HostedMCP,
    ModelRequestState,
    ModelSettings,
    UserLocation,
    WebFetch,
    WebSearch,
)
from towline.activities.providers.anthropic import AnthropicModel, parse_response
from towline.client import events, run, start_run
from towline.errors import RunError
from towline.messages import (
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    UserPart,
)
from towline.models import ModelInfo
from towline.runtime.ledger import counters_from_history
from towline.testing import history_events, towline_worker

MODEL = AnthropicModel(model="claude-sonnet-4-6", price_provider="anthropic")
"""`anthropic:claude-sonnet-4-6`, priced at Anthropic's prices (the fake's URL has none)."""
PAGES = [("https://forecast.weather.gov/sf", "National Weather Service"),
         ("https://www.wunderground.com/sf", "Weather Underground")]


@pytest.fixture
def claude(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeProvider, ServerTools]:
    """The fake server as Anthropic's endpoint, enforcing the Messages API and its server tools."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    rules = AnthropicRules()
    tools = ServerTools(rules)
    provider.rules += [rules, tools]
    return provider, tools


def bare(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


def price(model: str, usage: Any, **uses: int) -> float:
    """What genai-prices says one response costs (computed here, independently of towline)."""
    calc = genai_prices.calc_price(genai_prices.Usage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens or None,
        cache_write_tokens=usage.cache_write_tokens or None, **uses), model, provider_id="anthropic")
    return float(calc.total_price)


def search_turn(tools: ServerTools) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": "The forecast needs a search."},
            *tools.search("srvtoolu_01", "San Francisco weather today", PAGES),
            tools.cited("Sunny, 66°F.", *PAGES[0], "Sunny, with a high near 66."),
            {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 60, "b": 6}}]


async def test_a_web_search_goes_back_as_it_came_and_is_priced(
    client: Client, claude: tuple[FakeProvider, ServerTools]
) -> None:
    server, tools = claude
    first = search_turn(tools)
    server.script(tools.answer(first, "tool_use"), tools.answer([{"type": "text", "text": "66°F."}]))
    agent = Agent(name="claude-search", model=MODEL, tools=[add], model_retry_policy=QUICK,
                  settings=ModelSettings(thinking="low"),
                  native_tools=[WebSearch(max_uses=2, allowed_domains=["weather.gov", "wunderground.com"],
                                          user_location=UserLocation(city="San Francisco", country="US"))])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "Weather in SF, in °F?", task_queue=queue)
        seen = [e async for e in events(handle)]
        result = await handle.result()

    assert result.output == "66°F." and server.refusals() == []
    one, two = server.bodies()
    assert one["tools"][0] == {
        "type": "web_search_20250305", "name": "web_search", "max_uses": 2,
        "allowed_domains": ["weather.gov", "wunderground.com"],
        "user_location": {"type": "approximate", "city": "San Francisco", "country": "US"}}
    assert [t["name"] for t in one["tools"]] == ["web_search", "add"]
    # the turn goes back block for block: thinking, the search and its sealed results, the cited text
    issued = [tools.rules.issue(b) for b in first]
    assert bare(two["messages"][1]["content"]) == issued

    response = next(m for m in result.messages if isinstance(m, ModelResponse))
    [(call, ret)] = response.native_tool_calls
    assert isinstance(call, NativeToolCallPart) and isinstance(ret, NativeToolReturnPart)
    assert (call.tool_name, call.args, call.provider) == ("web_search", {"query": "San Francisco weather today"},
                                                           "anthropic")
    assert call.provider_data == issued[1] and ret.provider_data == issued[2]
    assert ret.content == [{"title": t, "url": u, "page_age": None} for u, t in PAGES]
    text = next(p for p in response.parts if isinstance(p, TextPart))
    assert text.citations == issued[3]["citations"]  # with its encrypted index

    # the ledger: one search, priced at genai-prices' rate on top of the tokens
    answered = [m for m in result.messages if isinstance(m, ModelResponse)]
    expected = (price("claude-sonnet-4-6", answered[0].usage, web_searches=1)
                + price("claude-sonnet-4-6", answered[1].usage))
    assert result.usage.native_tool_uses == {"web_search": 1}
    assert result.usage.cost == pytest.approx(expected) and result.usage.unpriced_requests == 0
    assert result.counters.cost_micros == round(expected * 1_000_000)
    # and the live events say what the provider ran
    [event] = [e for e in seen if e.type == "response" and e.step == 1]
    assert [(n["tool"], n["status"], n["provider"]) for n in event.field("native_tools")] == [
        ("web_search", "succeeded", "anthropic")]
    assert event.field("usage")["native_tool_uses"] == {"web_search": 1}


async def test_fetch_code_and_a_hosted_mcp_server(
    client: Client, claude: tuple[FakeProvider, ServerTools], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, tools = claude
    token = "mcp-token-7f3a9c2e1b5d"
    monkeypatch.setenv("DOCS_MCP_TOKEN", token)
    first = [*tools.fetch("srvtoolu_f1", "https://docs.temporal.io", "Temporal docs", "Durable execution."),
             *tools.bash("srvtoolu_c1", "ls /tmp", "notes.txt\n"),
             *tools.mcp("mcptoolu_m1", "docs", "ask", {"question": "What is a workflow?"}, "A function."),
             {"type": "tool_use", "id": "toolu_02", "name": "add", "input": {"a": 1, "b": 1}}]
    second = [*tools.bash("srvtoolu_c2", "cat /tmp/notes.txt", "otters\n"),
              {"type": "text", "text": "Done."}]
    server.script(tools.answer(first, "tool_use"), tools.answer(second))
    agent = Agent(name="claude-kit", model=MODEL, tools=[add], model_retry_policy=QUICK, native_tools=[
        WebFetch(citations=True, max_content_tokens=5000), CodeExecution(),
        HostedMCP(url="https://mcp.example.com/mcp", label="docs", allowed_tools=["ask"],
                  token_env="DOCS_MCP_TOKEN")])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "Read the docs and check /tmp.", task_queue=queue)
        result = await handle.result()
        recorded = await history_text(handle)

    assert result.output == "Done." and server.refusals() == []
    one, two = server.bodies()
    assert one["tools"][:2] == [
        {"type": "web_fetch_20250910", "name": "web_fetch", "citations": {"enabled": True},
         "max_content_tokens": 5000},
        {"type": "code_execution_20250825", "name": "code_execution"}]
    assert one["mcp_servers"] == [{"type": "url", "url": "https://mcp.example.com/mcp", "name": "docs",
                                   "authorization_token": token,
                                   "tool_configuration": {"enabled": True, "allowed_tools": ["ask"]}}]
    betas = server.requests[0].headers["anthropic-beta"].split(",")
    assert set(betas) == {"web-fetch-2025-09-10", "code-execution-2025-08-25", "mcp-client-2025-04-04"}
    assert "container" not in one and two["container"] == tools.container  # the same sandbox
    assert bare(two["messages"][1]["content"]) == [tools.rules.issue(b) for b in first]
    assert token not in recorded  # read on the worker, never in the history

    parts = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.parts
             if isinstance(p, NativeToolCallPart)]
    assert [(p.tool_name, p.args) for p in parts] == [
        ("web_fetch", {"url": "https://docs.temporal.io"}), ("code_execution", {"command": "ls /tmp"}),
        ("mcp", {"server": "docs", "tool": "ask", "arguments": {"question": "What is a workflow?"}}),
        ("code_execution", {"command": "cat /tmp/notes.txt"})]
    # fetches, code runs and MCP calls have no price genai-prices knows: counted, unpriced
    assert result.usage.native_tool_uses == {"code_execution": 2, "mcp": 1, "web_fetch": 1}
    assert result.usage.unpriced_requests == 2 and result.usage.known_cost is None
    assert result.usage.cost > 0 and result.counters.unpriced_requests == 2


@dataclass(frozen=True)
class Tamper(Capability):
    """Changes what a request sends back of the search: its encrypted content, or drops the result."""

    mode: str

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        sent = []
        for m in state.request_messages:
            if isinstance(m, ModelResponse):
                parts: list[Any] = []
                for p in m.parts:
                    if isinstance(p, NativeToolReturnPart) and self.mode == "drop":
                        continue
                    if isinstance(p, NativeToolReturnPart):
                        data = dict(p.provider_data)
                        data["content"] = [{**r, "encrypted_content": r["encrypted_content"][:-4] + "AAA="}
                                           for r in data["content"]]
                        p = p.model_copy(update={"provider_data": data})
                    parts.append(p)
                m = m.model_copy(update={"parts": parts})
            sent.append(m)
        return state.model_copy(update={"request_messages": sent})


@pytest.mark.parametrize(("mode", "refusal"), [
    ("edit", "messages.1.content.1: Invalid `encrypted_content` in `search_result` block"),
    ("drop", ("messages.1.content.0: web_search tool use with id srvtoolu_01 was found without a "
             "corresponding web_search_tool_result block")),
])
async def test_a_tampered_or_dropped_result_is_refused(
    client: Client, claude: tuple[FakeProvider, ServerTools], mode: str, refusal: str
) -> None:
    """A conversation that searched goes on (its history given to the run): a hook that edits
    the search's encrypted content, or drops its result, gets the API's 400."""
    server, tools = claude
    turn = [*tools.search("srvtoolu_01", "San Francisco weather today", PAGES),
            tools.cited("Sunny, 66°F.", *PAGES[0], "Sunny, with a high near 66.")]
    searched = parse_response(message(turn), ModelInfo(), "claude-sonnet-4-6")
    history = [ModelRequest(parts=[UserPart(content="Weather in SF?")]), searched]
    agent = Agent(name=f"claude-tamper-{mode}", model=MODEL, model_retry_policy=QUICK,
                  native_tools=[WebSearch()], capabilities=[Tamper(mode)])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "And tomorrow?", task_queue=queue, message_history=history)
    assert info.value.reason == "ModelRequestFailed" and refusal in info.value.message
    assert [r.refused for r in server.requests] == [True]  # final: not retried


async def test_a_paused_turn_is_continued_within_its_step(
    client: Client, claude: tuple[FakeProvider, ServerTools]
) -> None:
    server, tools = claude
    done = tools.search("srvtoolu_p1", "sf weather", PAGES[:1])
    hanging = tools.search("srvtoolu_p2", "sf air quality", PAGES[1:])
    paused = [{"type": "text", "text": "Searching."}, *done, hanging[0]]  # ends mid-search
    rest = [hanging[1], {"type": "text", "text": "Sunny; the air is good."}]
    server.script(tools.answer(paused, "pause_turn"), tools.answer(rest))
    agent = Agent(name="claude-pause", model=MODEL, model_retry_policy=QUICK, native_tools=[WebSearch()])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "Weather and air in SF?", task_queue=queue)
        result = await handle.result()
        history = await history_events(handle)

    assert result.output == "Searching.Sunny; the air is good." and server.refusals() == []
    one, two = server.bodies()
    # the continuation: the same request, with the paused turn last, as it came
    assert two["messages"][:-1] == [{**m, "content": bare(m["content"])} if isinstance(m["content"], list)
                                    else m for m in one["messages"]]
    assert two["messages"][-1]["role"] == "assistant"
    assert bare(two["messages"][-1]["content"]) == paused
    # one step, two model requests; one response holding the whole turn, usage summed
    assert (result.counters.run_step, result.counters.requests) == (1, 2)
    [response] = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [p.part_kind for p in response.parts] == [
        "text", "native_tool_call", "native_tool_return", "native_tool_call", "native_tool_return", "text"]
    assert response.suspended is None and response.usage.requests == 2
    assert result.usage.native_tool_uses == {"web_search": 2}
    # the ledger: the continuation's header already counts the paused piece (request 1 answered)
    headers = counters_from_history(history)[:2]
    assert [(c.run_step, c.requests) for c in headers] == [(1, 0), (1, 1)]
    assert headers[1].input_tokens > 0 and headers[1].input_tokens < result.counters.input_tokens
    summaries = [json.loads(e.user_metadata.summary.data) for e in history
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert summaries == ["anthropic:claude-sonnet-4-6 · step 1 · web_search"] * 2


async def test_the_fake_keeps_the_server_tool_rules(claude: tuple[FakeProvider, ServerTools]) -> None:
    """The rules themselves, through the SDK: a changed continuation, a dangling call mid-turn,
    and the MCP connector without its beta are refused; the turn as it came is taken."""
    server, tools = claude
    sdk: Any = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)

    def send(messages: list[dict[str, Any]], **extra: Any) -> Any:
        return sdk.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=messages,
                                   extra_body=extra or None)

    paused = [{"type": "text", "text": "Searching."}, tools.search("srvtoolu_x", "q", PAGES)[0]]
    server.script(tools.answer(paused, "pause_turn"), tools.answer([{"type": "text", "text": "ok"}]))
    ask: list[dict[str, Any]] = [{"role": "user", "content": "Search."}]
    send(ask)

    changed = [{"type": "text", "text": "Searching!"}, paused[1]]
    with pytest.raises(anthropic.BadRequestError, match="must be sent back as it was returned"):
        send([*ask, {"role": "assistant", "content": changed}])
    with pytest.raises(anthropic.BadRequestError, match="was found without a corresponding"):
        send([*ask, {"role": "assistant", "content": paused}, {"role": "user", "content": "And?"}])
    with pytest.raises(anthropic.BadRequestError, match="mcp_servers: Extra inputs are not permitted"):
        send(ask, mcp_servers=[{"type": "url", "url": "https://x.y", "name": "x"}])
    answer = send([*ask, {"role": "assistant", "content": paused}])
    assert answer.content[0].type == "text"
