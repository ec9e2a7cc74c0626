"""`examples/research.py --native` as docs/models.md runs it: offline on its `FunctionModel`
(native tool parts a provider would report, shown as `towline run` and `towline show` print
them), and on Claude and the Responses API against the fakes enforcing their APIs, where the
request carries the provider's own web search and no `fetch_url`."""

from __future__ import annotations

import re

import pytest
from anthropic_rules import AnthropicRules
from anthropic_server_tools import ServerTools
from fake_server import FakeProvider
from openai_replies import message_item, responses_answer
from openai_rules import ResponsesWire
from provider_helpers import towline_show
from readme import cli_env, readme

pytestmark = pytest.mark.timeout(240)

PAGES = [("https://temporal.io/blog/streams", "Workflow Streams")]


def run_id(err: str) -> str:
    found = re.search(r"Run (research-native-\S+) started", err)
    assert found, err
    return found.group(1)


async def test_the_native_mode_offline_on_claude_and_on_the_responses_api(
    provider: FakeProvider, target: str, namespace: str
) -> None:
    """The three commands of the docs, one after the other (each a `towline run` with a worker
    of its own on the same task queue: at once, one's worker would take another's run)."""
    rules = AnthropicRules()
    tools = ServerTools(rules)
    wire = ResponsesWire()
    provider.rules += [rules, tools, *wire.rules()]
    claude = tools.answer([*tools.search("srvtoolu_n1", "Temporal releases this month", PAGES),
                           tools.cited("Temporal shipped Workflow Streams.", *PAGES[0], "Streams")])
    search = {"type": "web_search_call", "id": "ws_n1", "status": "completed",
              "action": {"type": "search", "query": "Temporal releases"}}
    responses = wire.answer(responses_answer([search, message_item("Workflow Streams.")]))

    provider.script(claude, responses)
    offline = await readme('python examples/research.py --native "What did Temporal ship this month?"',
                           env=cli_env(target, namespace), timeout=120)
    on_claude = await readme(
        'ANTHROPIC_API_KEY=sk-ant-... python examples/research.py --native "What did Temporal ship '
        'this month?" --model anthropic:claude-sonnet-4-6',
        env=cli_env(target, namespace, {"ANTHROPIC_BASE_URL": provider.url}), timeout=120)
    on_openai = await readme(
        'OPENAI_API_KEY=sk-... python examples/research.py --native "What did Temporal ship this '
        'month?" --model openai-responses:gpt-5',
        env=cli_env(target, namespace, {"OPENAI_BASE_URL": f"{provider.url}/v1"}), timeout=120)

    assert offline.code == 0, offline.err
    assert "this model has no network" in offline.out
    assert 'model runs web_search(query="What did Temporal ship this month?") (offline) -> succeeded' \
        in offline.err
    code, shown, _ = await towline_show(run_id(offline.err), target, namespace)
    assert code == 0
    assert 'model      runs web_search(query="What did Temporal ship this month?") (offline) ' \
           "[offline_search_1]" in shown
    assert "provider   web_search [offline_search_1] succeeded:" in shown

    assert on_claude.code == 0, on_claude.err
    assert on_claude.out.strip() == "Temporal shipped Workflow Streams."
    assert 'model runs web_search(query="Temporal releases this month") (anthropic) -> succeeded' \
        in on_claude.err
    assert on_openai.code == 0, on_openai.err
    assert on_openai.out.strip() == "Workflow Streams."
    bodies = {r.path: r.body for r in provider.requests}
    claude_body, openai_body = bodies["/v1/messages"], bodies["/v1/responses"]
    # the provider's own search, and no fetch_url: nothing runs on the worker but the model call
    assert [(t["type"], t["name"]) for t in claude_body["tools"]] == [("web_search_20250305", "web_search")]
    assert openai_body["tools"] == [{"type": "web_search"}]
    assert "web_search_call.action.sources" in openai_body["include"]
    assert provider.refusals() == []
