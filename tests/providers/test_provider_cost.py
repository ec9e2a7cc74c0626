"""Usage and cost of provider responses: priced with genai-prices, summed into the run's usage
and ledger (read back from the history's memo snapshots), capped by `Limits.cost_limit`,
and unknown (not zero) where no price is known."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from uuid import uuid4

import genai_prices
import pytest
from fake_server import FakeProvider, Reply
from google.protobuf.duration_pb2 import Duration
from openai_replies import completion, tool_call
from provider_helpers import KEY, QUICK, add, towline_show
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from towline import Agent, Limits
from towline.client import run, start_run
from towline.errors import RunError
from towline.models import OpenAIChatModel
from towline.runtime.ledger import MEMO_KEY, counters_from_history, decode_counters
from towline.testing import towline_worker

SERVED = "gpt-4.1-mini-2025-04-14"


def price(input_tokens: int, output_tokens: int, cached: int = 0) -> Decimal:
    """What genai-prices says one response of the served model costs."""
    usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                               cache_read_tokens=cached or None)
    return genai_prices.calc_price(usage, SERVED, provider_id="openai").total_price


def priced_model(provider: FakeProvider) -> OpenAIChatModel:
    """gpt-4.1-mini served by the fake endpoint, priced as OpenAI's."""
    return OpenAIChatModel("gpt-4.1-mini", base_url=f"{provider.url}/v1", api_key=KEY,
                           price_provider="openai")


def script_two_steps(provider: FakeProvider) -> None:
    provider.script(
        Reply(completion(calls=[tool_call("c1", "add", {"a": 1, "b": 2})], prompt_tokens=1200,
                         completion_tokens=40)),
        Reply(completion("3", prompt_tokens=1300, completion_tokens=10, cached=1024)),
    )


async def test_cost_is_summed_into_usage_and_the_ledger(client: Client, provider: FakeProvider) -> None:
    script_two_steps(provider)
    agent = Agent(name="prov-cost", model=priced_model(provider), tools=[add], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "1 + 2?", task_queue=queue)
        result = await handle.result()

    first, second = price(1200, 40), price(1300, 10, cached=1024)
    assert first > 0 and second > 0
    expected = float(first + second)
    assert result.usage.cost == pytest.approx(expected)
    assert result.usage.unpriced_requests == 0
    assert result.usage.known_cost == pytest.approx(expected)
    # the ledger: every snapshot's cost, read back from the history's memo upserts
    snapshots = counters_from_history((await handle.fetch_history()).events)
    costs = [s.cost_micros for s in snapshots]
    assert costs[0] is None  # nothing spent yet when the run started
    assert round(float(first) * 1_000_000) in costs
    assert costs[-1] == round(expected * 1_000_000) == result.counters.cost_micros
    description = await handle.describe()
    memo = decode_counters(description.raw_description.workflow_execution_info.memo.fields[MEMO_KEY])
    assert memo.cost_micros == round(expected * 1_000_000)
    assert memo.unpriced_requests == 0


async def test_cost_limit_stops_the_run_before_the_next_request(client: Client, provider: FakeProvider) -> None:
    script_two_steps(provider)
    agent = Agent(name="prov-cost-limit", model=priced_model(provider), tools=[add],
                  limits=Limits(cost_limit=float(price(1200, 40)) / 2), model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "1 + 2?", task_queue=queue)
    assert info.value.reason == "UsageLimitExceeded"
    assert "cost_limit" in info.value.message
    assert len(provider.requests) == 1  # the second request was never made
    assert info.value.partial is not None
    assert info.value.partial.counters.cost_micros == round(float(price(1200, 40)) * 1_000_000)


async def test_an_unknown_price_is_unknown_not_zero(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, target: str, namespace: str
) -> None:
    monkeypatch.setenv("OLLAMA_BASE_URL", f"{provider.url}/v1")
    provider.script(Reply(completion(calls=[tool_call("c1", "add", {"a": 1, "b": 2})],
                                     model="llama3.2")),
                    Reply(completion("3", model="llama3.2")))
    agent = Agent(name="prov-cost-unknown", model="ollama:llama3.2", tools=[add], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "1 + 2?", task_queue=queue)
        result = await handle.result()

    assert result.output == "3"
    assert provider.requests[0].path == "/v1/chat/completions"
    assert provider.bodies()[0]["model"] == "llama3.2"
    assert (result.usage.cost, result.usage.unpriced_requests, result.usage.known_cost) == (0.0, 2, None)
    assert (result.counters.cost_micros, result.counters.unpriced_requests) == (0, 2)
    assert result.counters.known_cost_micros is None
    code, shown, _ = await towline_show(handle.id, target, namespace)
    assert code == 0
    assert "cost                 no price known (2 requests)" in shown  # not "at least $0"


async def test_towline_show_prints_the_cost(
    client: Client, provider: FakeProvider, target: str, namespace: str
) -> None:
    script_two_steps(provider)
    agent = Agent(name="prov-cost-show", model=priced_model(provider), tools=[add], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "1 + 2?", task_queue=queue)
        result = await handle.result()
    code, shown, _ = await towline_show(handle.id, target, namespace)
    assert code == 0 and result.counters.cost_micros is not None
    assert f"cost                 ${result.counters.cost_micros / 1_000_000:.6f}" in shown
    assert "(1024 cached)" in shown


async def test_cost_search_attribute_where_the_namespace_has_room(
    client: Client, provider: FakeProvider, target: str
) -> None:
    """SQL visibility (the dev server) has three Int slots; a namespace that gives one to
    TowlineCostMicros gets it upserted, and runs can be found by what they cost."""
    ns = f"ns-cost-{uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(RegisterNamespaceRequest(
        namespace=ns, workflow_execution_retention_period=Duration(seconds=86400)))
    await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace=ns, search_attributes={
            "TowlineCostMicros": IndexedValueType.INDEXED_VALUE_TYPE_INT,
            "TowlineAgent": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}))
    ns_client = await Client.connect(target, namespace=ns)
    script_two_steps(provider)
    agent = Agent(name="prov-cost-attr", model=priced_model(provider), tools=[add], model_retry_policy=QUICK)
    async with towline_worker(ns_client, [agent]) as (tc, queue):
        result = await run(tc, agent, "1 + 2?", task_queue=queue)
    spent = result.counters.cost_micros
    assert spent
    query = f'TowlineCostMicros = {spent} AND TowlineAgent = "prov-cost-attr"'
    found: list[str] = []
    for _ in range(100):  # visibility is eventually consistent
        found = [w.id async for w in ns_client.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.1)
    assert found == [result.run_id]
