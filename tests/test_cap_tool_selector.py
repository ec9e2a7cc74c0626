"""ToolSelector in real runs: a selector model narrows what the main model is offered."""

from __future__ import annotations

from temporalio.client import Client

from towline import Agent, ModelRequest, ModelResponse, TextPart, ToolCallPart, Usage, tool
from towline.capabilities import ToolSelector
from towline.client import run
from towline.messages import Message, SystemPart, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool
def stocks(symbol: str) -> str:
    """Latest stock price for a ticker symbol."""
    return f"{symbol}: 100"


@tool
def translate(text: str) -> str:
    """Translate text into French."""
    return f"fr:{text}"


@tool
def calendar(day: str) -> str:
    """Appointments on a day."""
    return f"nothing on {day}"


@tool
def clock() -> str:
    """The current time."""
    return "noon"


TOOLS = [weather, stocks, translate, calendar, clock]
SELECTOR_USAGE = Usage(requests=1, input_tokens=70, output_tokens=7)
MAIN_USAGE = Usage(requests=1, input_tokens=10, output_tokens=5)


def selector_model(answer: str, prompts: list[list[Message]]) -> FunctionModel:
    def select(messages: list[Message], info: ModelInfo) -> ModelResponse:
        prompts.append(messages)
        return ModelResponse(parts=[TextPart(content=answer)], usage=SELECTOR_USAGE)

    return FunctionModel(select, model_name="selector")


def offered(requests: list[ModelInfo]) -> list[list[str]]:
    return [sorted(t.name for t in info.tools) for info in requests]


async def test_selector_narrows_the_offered_tools_and_its_usage_reaches_the_ledger(
    client: Client,
) -> None:
    seen: list[ModelInfo] = []
    prompts: list[list[Message]] = []

    def main(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        seen.append(info)
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart(tool_name="weather", args={"city": "Oslo"},
                                                     tool_call_id="w1")])
        return "It is sunny in Oslo."

    agent = Agent(
        name="selector-narrows", model=FunctionModel(main, model_name="selector-main"),
        tools=TOOLS,
        capabilities=[ToolSelector("selector", max_tools=2, always_include=["clock"])],
    )
    selector = selector_model('Sure: ```json\n["weather", "calendar"]\n```', prompts)
    async with towline_worker(client, [agent], models={"selector": selector}) as (tc, queue):
        result = await run(tc, agent, "What's the weather in Oslo?", task_queue=queue)

    assert result.output == "It is sunny in Oslo."
    assert offered(seen) == [["calendar", "clock", "weather"]] * 2
    # the selector saw the request and every candidate with its description
    listing = prompts[0][-1].parts[0]
    assert isinstance(listing, UserPart)
    assert "What's the weather in Oslo?" in listing.content
    assert "- stocks: Latest stock price for a ticker symbol." in listing.content
    assert "clock" not in listing.content  # always included: not a candidate
    assert isinstance(prompts[0][0].parts[0], SystemPart)
    # two turns: two selector calls and two main calls, all in the ledger
    assert len(prompts) == 2
    tokens = 2 * (SELECTOR_USAGE.total_tokens + MAIN_USAGE.total_tokens)
    assert result.counters.input_tokens + result.counters.output_tokens == tokens
    assert result.usage.total_tokens == tokens
    assert result.counters.requests == 2  # the run's own model requests


async def test_a_tool_the_selector_left_out_is_denied(client: Client) -> None:
    calls = 0

    def main(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        nonlocal calls
        calls += 1
        if calls == 1:
            return ModelResponse(parts=[ToolCallPart(tool_name="stocks", args={"symbol": "X"},
                                                     tool_call_id="s1")])
        return "done"

    agent = Agent(
        name="selector-denies", model=FunctionModel(main, model_name="selector-denies-main"),
        tools=TOOLS, capabilities=[ToolSelector("selector", max_tools=1)],
    )
    selector = selector_model('["translate"]', [])
    async with towline_worker(client, [agent], models={"selector": selector}) as (tc, queue):
        result = await run(tc, agent, "price of X?", task_queue=queue)

    returns = [p for m in result.messages if isinstance(m, ModelRequest)
               for p in m.parts if p.part_kind == "tool_return"]
    assert [(r.tool_name, r.status) for r in returns] == [("stocks", "denied")]
    assert result.counters.tool_calls == 0


async def test_an_unusable_selector_answer_falls_back_to_the_first_tools(client: Client) -> None:
    seen: list[ModelInfo] = []

    def main(messages: list[Message], info: ModelInfo) -> str:
        seen.append(info)
        return "ok"

    agent = Agent(
        name="selector-fallback", model=FunctionModel(main, model_name="selector-fallback-main"),
        tools=TOOLS, capabilities=[ToolSelector("selector", max_tools=3)],
    )
    selector = selector_model("I think the weather tool, maybe.", [])
    async with towline_worker(client, [agent], models={"selector": selector}) as (tc, queue):
        result = await run(tc, agent, "hi", task_queue=queue)

    assert offered(seen) == [["stocks", "translate", "weather"]]
    assert result.counters.input_tokens == MAIN_USAGE.input_tokens + SELECTOR_USAGE.input_tokens


async def test_no_selection_call_when_few_tools_are_offered(client: Client) -> None:
    prompts: list[list[Message]] = []
    seen: list[ModelInfo] = []

    def main(messages: list[Message], info: ModelInfo) -> str:
        seen.append(info)
        return "ok"

    agent = Agent(
        name="selector-few", model=FunctionModel(main, model_name="selector-few-main"),
        tools=[weather, clock], capabilities=[ToolSelector("selector", max_tools=2)],
    )
    async with towline_worker(client, [agent], models={"selector": selector_model("[]", prompts)}
                              ) as (tc, queue):
        result = await run(tc, agent, "hi", task_queue=queue)

    assert prompts == []
    assert offered(seen) == [["clock", "weather"]]
    assert result.usage.total_tokens == MAIN_USAGE.total_tokens


def test_configuration_is_validated() -> None:
    import pytest

    from towline.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        ToolSelector("", max_tools=2)
    with pytest.raises(ConfigurationError):
        ToolSelector("m", max_tools=0)
    with pytest.raises(ConfigurationError):
        ToolSelector("m", always_include="clock")


def test_selector_answers_are_parsed_robustly() -> None:
    from towline.capabilities.tool_selector import parse_selection

    known = ["weather", "stocks", "clock"]
    assert parse_selection('["stocks", "weather"]', known) == ["stocks", "weather"]
    assert parse_selection('Use these: ["clock", "nope", "clock"].', known) == ["clock"]
    assert parse_selection('{"tools": [{"name": "weather"}]}', known) == ["weather"]
    assert parse_selection("[]", known) == []
    assert parse_selection('["nope"]', known) is None
    assert parse_selection("weather and clock", known) is None
