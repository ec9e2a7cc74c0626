"""Native tools' options are checked when a tool is built (a typed error naming the option), travel
as JSON unchanged, and are part of the agent's version; a background call's waits back off."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from towline import (
    Agent,
    CodeExecution,
    ConfigurationError,
    FileSearch,
    HostedMCP,
    ModelSettings,
    UserLocation,
    WebFetch,
    WebSearch,
)
from towline.messages import ModelResponse, Suspended, TextPart, Usage
from towline.native_tools import NATIVE_TOOLS
from towline.runtime.fingerprint import agent_version
from towline.workflows.model_call import joined, poll_waits


@pytest.mark.parametrize(("build", "named"), [
    (lambda: WebSearch(max_uses=0), "WebSearch: max_uses: Input should be greater than or equal to 1"),
    (lambda: WebSearch(allowed_domains="example.com"), "allowed_domains: must be a list of domains"),
    (lambda: WebSearch(allowed_domains=["https://example.com"]), "'https://example.com' is not a domain"),
    (lambda: WebSearch(allowed_domains=[]), "must name at least one domain"),
    (lambda: WebFetch(allowed_domains=["a.com"], blocked_domains=["b.com"]),
     "allowed_domains and blocked_domains cannot both be set"),
    (lambda: WebSearch(user_location=UserLocation(country="Netherlands")), "country: String should match"),
    (lambda: WebSearch(search_context_size="huge"),  # pyright: ignore[reportArgumentType]
     "search_context_size: Input should be 'low'"),
    (lambda: FileSearch(vector_store_ids=[]), "vector_store_ids: "),
    (lambda: FileSearch(vector_store_ids="vs_1"), "must be a list of vector store ids"),
    (lambda: HostedMCP(url="ftp://x", label="docs"), "url: String should match pattern"),
    (lambda: HostedMCP(url="https://x.y/mcp", label="my docs"), "'my docs' is not a server label"),
    (lambda: HostedMCP(url="https://x.y/mcp", label="d", token_env="MY-TOKEN"),
     "'MY-TOKEN' is not an environment variable name"),
    (lambda: HostedMCP(url="https://x.y/mcp", label="d", allowed_tools=[]), "at least one non-empty tool"),
    (lambda: CodeExecution(surprise=True),  # pyright: ignore[reportCallIssue]
     "surprise: Extra inputs are not permitted"),
])
def test_a_wrong_option_is_refused_naming_it(build: Any, named: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        build()
    assert named in str(info.value)


def test_an_agent_takes_a_list_of_native_tools_one_of_each() -> None:
    with pytest.raises(ConfigurationError, match="native_tools must be a list"):
        Agent(name="a", native_tools=WebSearch())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="two native tools 'web_search'"):
        Agent(name="a", native_tools=[WebSearch(), WebSearch(max_uses=1)])
    with pytest.raises(ConfigurationError, match="two native tools 'mcp:docs'"):
        Agent(name="a", native_tools=[HostedMCP(url="https://a.b/mcp", label="docs"),
                                      HostedMCP(url="https://c.d/mcp", label="docs")])
    with pytest.raises(ConfigurationError, match="is not a native tool"):
        Agent(name="a", native_tools=["web_search"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="model_poll_max_interval must not be shorter"):
        Agent(name="a", model_poll_interval=timedelta(minutes=5), model_poll_max_interval=timedelta(minutes=1))
    two = Agent(name="a", native_tools=[HostedMCP(url="https://a.b/mcp", label="docs"),
                                        HostedMCP(url="https://c.d/mcp", label="wiki")])
    assert isinstance(two.native_tools, tuple) and len(two.native_tools) == 2


def test_native_tools_travel_as_json_and_are_part_of_the_version() -> None:
    tools = [WebSearch(allowed_domains=["docs.python.org/3"], user_location=UserLocation(city="Utrecht")),
             WebFetch(citations=True), CodeExecution(container="cntr_1"),
             FileSearch(vector_store_ids=["vs_1"], max_num_results=3),
             HostedMCP(url="https://a.b/mcp", label="docs", allowed_tools=["ask"], token_env="DOCS_TOKEN")]
    assert NATIVE_TOOLS.validate_json(NATIVE_TOOLS.dump_json(tools)) == tools
    plain = Agent(name="v")
    assert agent_version(Agent(name="v")) == agent_version(plain)  # none: the version it always had
    searching = Agent(name="v", native_tools=[WebSearch()])
    assert agent_version(searching) != agent_version(plain)
    assert agent_version(Agent(name="v", native_tools=[WebSearch(max_uses=2)])) != agent_version(searching)
    assert agent_version(Agent(name="v", settings=ModelSettings(background=True))) != agent_version(plain)
    assert agent_version(Agent(name="v", settings=ModelSettings(temperature=0.2))) == agent_version(plain)


def test_background_waits_double_up_to_the_longest() -> None:
    wait = poll_waits(timedelta(seconds=5), timedelta(minutes=2))
    assert [wait(n).total_seconds() for n in range(7)] == [5, 10, 20, 40, 80, 120, 120]
    assert wait(10_000) == timedelta(minutes=2)


def test_a_paused_turn_is_joined_in_order() -> None:
    paused = Suspended(reason="pause_turn", provider="anthropic")
    one = ModelResponse(id="r1", parts=[TextPart(content="a")], usage=Usage(requests=1, input_tokens=5),
                        finish_reason="stop", suspended=paused, model_name="m-1")
    two = ModelResponse(id="r2", parts=[TextPart(content="b")], usage=Usage(requests=1, output_tokens=3),
                        finish_reason="tool_calls", model_name="m-2")
    assert joined([one]) is one
    whole = joined([one, two])
    assert (whole.id, whole.text, whole.finish_reason, whole.model_name, whole.suspended) == (
        "r1", "ab", "tool_calls", "m-2", None)
    assert whole.usage == Usage(requests=2, input_tokens=5, output_tokens=3)
