"""A native tool (or an option of one, or background mode) a provider does not have fails the
run with `ModelRequestFailed` naming the tool and the model, before anything is sent: the fake
provider, standing in for every provider at once, sees no request at all."""

from __future__ import annotations

import asyncio

import pytest
from fake_server import FakeProvider
from provider_helpers import KEY, QUICK
from temporalio.client import Client

from towline import (
    Agent,
    CodeExecution,
    FileSearch,
    HostedMCP,
    ModelSettings,
    WebFetch,
    WebSearch,
)
from towline.client import run
from towline.errors import RunError
from towline.native_tools import NativeTool
from towline.testing import towline_worker

CASES: list[tuple[str, list[NativeTool], bool, str]] = [
    ("anthropic:claude-sonnet-4-6", [FileSearch(vector_store_ids=["vs_1"])], False,
     ("model 'anthropic:claude-sonnet-4-6' has no native tool FileSearch: its provider does not run it "
     "(it is in openai-responses:")),
    ("anthropic:claude-sonnet-4-6", [WebSearch(search_context_size="high")], False,
     "cannot run native tool WebSearch with search_context_size="),
    ("anthropic:claude-sonnet-4-6", [CodeExecution(file_ids=["file-1"])], False,
     "cannot run native tool CodeExecution with file_ids="),
    ("openai-responses:gpt-5", [WebFetch()], False,
     "model 'openai-responses:gpt-5' has no native tool WebFetch"),
    ("openai-responses:gpt-5", [WebSearch(blocked_domains=["spam.example"])], False,
     "cannot run native tool WebSearch with blocked_domains="),
    ("openai-responses:gpt-5", [WebSearch(max_uses=3)], False,
     "cannot run native tool WebSearch with max_uses="),
    ("openai:gpt-4.1-mini", [WebSearch()], False,
     "model 'openai:gpt-4.1-mini' has no native tool WebSearch"),
    ("google:gemini-2.5-flash", [HostedMCP(url="https://mcp.example.com/mcp", label="docs")], False,
     "model 'google:gemini-2.5-flash' has no native tool HostedMCP"),
    ("google:gemini-2.5-flash", [WebSearch(allowed_domains=["example.com"])], False,
     "cannot run native tool WebSearch with allowed_domains=: Gemini's built-in tools take no options"),
    ("bedrock:anthropic.claude-sonnet-4-6", [CodeExecution()], False,
     "model 'bedrock:anthropic.claude-sonnet-4-6' has no native tool CodeExecution"),
    ("anthropic:claude-sonnet-4-6", [], True,
     "model 'anthropic:claude-sonnet-4-6' has no background mode (ModelSettings.background)"),
]


async def test_a_missing_native_tool_fails_before_anything_is_sent(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    for prefix in ("OPENAI", "ANTHROPIC"):
        monkeypatch.setenv(f"{prefix}_BASE_URL", provider.url + ("/v1" if prefix == "OPENAI" else ""))
        monkeypatch.setenv(f"{prefix}_API_KEY", KEY)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", provider.url)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", provider.url)
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", KEY)
    agents = [Agent(name=f"lacking-{i}", model=model, native_tools=tools, model_retry_policy=QUICK,
                    settings=ModelSettings(background=background))
              for i, (model, tools, background, _) in enumerate(CASES)]
    async with towline_worker(client, agents) as (tc, queue):
        failures = await asyncio.gather(
            *(run(tc, agent, "Search the web.", task_queue=queue) for agent in agents),
            return_exceptions=True)
    for agent, failure, (_, _, _, expected) in zip(agents, failures, CASES, strict=True):
        assert isinstance(failure, RunError), (agent.name, failure)
        assert failure.reason == "ModelRequestFailed", agent.name
        assert expected in failure.message, (agent.name, failure.message)
        assert "nothing was sent" in failure.message or agent.settings.background
        assert failure.partial is not None and failure.partial.request_count == 0
    assert provider.requests == []  # the fake saw no request at all
