"""`wrap_model_call(request, next)`: narrow tools, retry, fall back, short-circuit.

`next(request)` schedules the model activity; tools a wrapper removes are not
offered to the model and are not executable in that turn.
"""

from __future__ import annotations

from datetime import timedelta

from mw_helpers import Recorder, activity_types, calls, run_agent, text, tool_returns
from temporalio.client import Client
from temporalio.common import RetryPolicy

from towline import Agent, Middleware, ModelCallRequest, ModelResponse, TextPart, Usage, tool
from towline.capabilities import NextModelCall
from towline.errors import ModelRequestFailed
from towline.messages import Message
from towline.models import FunctionModel, ModelHTTPError, ModelInfo


async def test_narrowed_tools_are_offered_and_executable_alone(client: Client) -> None:
    ran: list[str] = []

    @tool
    def alpha() -> str:
        """Allowed."""
        ran.append("alpha")
        return "alpha ok"

    @tool
    def beta() -> str:
        """Removed by the wrapper."""
        ran.append("beta")
        return "beta ok"

    async def only_alpha(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        narrowed = [t for t in request.tools if t.name == "alpha"]
        return await next(request.model_copy(update={"tools": narrowed}))

    model = Recorder.script("mw-wrap-narrow-model",
                            calls(("alpha", {}), ("beta", {})), text("done"))
    agent = Agent(name="mw-wrap-narrow", model=model.model(), tools=[alpha, beta],
                  capabilities=[Middleware("selector", wrap_model_call=only_alpha)])
    result, events = await run_agent(client, agent)

    assert result.output == "done"
    assert [s.tool_names for s in model.seen] == [["alpha"], ["alpha"]]
    assert ran == ["alpha"]
    returns = {r.tool_name: r.status for r in tool_returns(result.messages)}
    assert returns == {"alpha": "succeeded", "beta": "denied"}
    assert "towline.tool.beta" not in activity_types(events)
    assert result.counters.tool_calls == 1


async def test_wrapper_retries_by_calling_next_twice(client: Client) -> None:
    async def retry_empty(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        response = await next(request)
        if response.text == "bad":
            response = await next(request)
        return response

    model = Recorder.script("mw-wrap-retry-model", text("bad"), text("good"))
    agent = Agent(name="mw-wrap-retry", model=model.model(),
                  capabilities=[Middleware("retrier", wrap_model_call=retry_empty)])
    result, events = await run_agent(client, agent)

    assert result.output == "good"
    assert activity_types(events) == ["towline.model_request"] * 2
    assert result.counters.requests == 2 and result.counters.run_step == 1
    # both calls are paid for; only the response the wrapper returned is in the history
    assert result.counters.input_tokens == 20 and result.counters.output_tokens == 10
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [r.text for r in responses] == ["good"]


async def test_wrapper_short_circuits_without_calling_the_model(client: Client) -> None:
    async def cached(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        return ModelResponse(parts=[TextPart(content="from cache")], model_name="cache")

    model = Recorder.script("mw-wrap-cache-model", "never")
    agent = Agent(name="mw-wrap-cache", model=model.model(),
                  capabilities=[Middleware("cache", wrap_model_call=cached)])
    result, events = await run_agent(client, agent)

    assert result.output == "from cache"
    assert model.seen == []
    assert "towline.model_request" not in activity_types(events)
    assert result.counters.requests == 0 and result.counters.run_step == 1
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert len(responses) == 1 and responses[0].id and responses[0].text == "from cache"


async def test_wrapper_falls_back_to_another_model(client: Client) -> None:
    attempts: list[str] = []

    def broken(messages: list[Message], info: ModelInfo) -> str:
        attempts.append("primary")
        raise ModelHTTPError(400, "bad request")

    async def fallback(request: ModelCallRequest, next: NextModelCall) -> ModelResponse:
        try:
            return await next(request)
        except ModelRequestFailed:
            return await next(request.model_copy(update={"model": "mw-wrap-backup"}))

    backup = Recorder.script("mw-wrap-backup", "from backup")
    agent = Agent(
        name="mw-wrap-fallback", model=FunctionModel(broken, model_name="mw-wrap-primary"),
        model_retry_policy=RetryPolicy(maximum_attempts=1),
        model_timeout=timedelta(seconds=10),
        capabilities=[Middleware("fallback", wrap_model_call=fallback)],
    )
    result, events = await run_agent(client, agent, models={"mw-wrap-backup": backup.model(
        usage=Usage(requests=1, input_tokens=3, output_tokens=2))})

    assert result.output == "from backup"
    assert attempts == ["primary"]  # a non-retryable 400: one attempt only
    assert len(backup.seen) == 1 and backup.seen[0].info.model_name == "mw-wrap-backup"
    assert activity_types(events) == ["towline.model_request"] * 2
    last = result.messages[-1]
    assert isinstance(last, ModelResponse) and last.model_name == "mw-wrap-backup"
    assert result.counters.input_tokens == 3
