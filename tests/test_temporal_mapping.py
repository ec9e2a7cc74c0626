"""What a run looks like in Temporal: activity summaries, current details, search attributes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ports import free_port
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import DataConverter

from towline import Agent, ModelResponse, ToolCallPart, tool
from towline.client import run, start_run
from towline.devserver import DevServerProcess
from towline.messages import Message
from towline.models import FunctionModel, ModelInfo
from towline.runtime.registration import registered_search_attributes
from towline.runtime.search_attributes import SQL_VISIBILITY_KEYS
from towline.testing import towline_worker

released = asyncio.Event()


@tool
async def lookup(city: str, days: int = 3) -> str:
    """Weather for a city."""
    await released.wait()
    return f"sunny in {city} for {days} days"


def weather(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if not any(m.kind == "response" for m in messages):
        return ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"city": "Oslo"})])
    return "sunny"


agent = Agent(name="mapping-weather", model=FunctionModel(weather, model_name="weather-model"),
              tools=[lookup])


async def test_activities_carry_readable_summaries_and_the_run_shows_details(
    client: Client,
) -> None:
    released.clear()
    async with towline_worker(client, [agent]) as (tclient, queue):
        handle = await start_run(tclient, agent, "weather?", task_queue=queue)
        metadata = await handle.query("__temporal_workflow_metadata")
        for _ in range(200):  # the tool is running: the details show the step
            metadata = await handle.query("__temporal_workflow_metadata")
            if "step 1/" in (metadata.current_details or ""):
                break
            await asyncio.sleep(0.05)
        assert "**mapping-weather** — running" in metadata.current_details
        released.set()
        await handle.result()
        history = await handle.fetch_history()
    converter = DataConverter.default.payload_converter
    summaries = [
        converter.from_payload(e.user_metadata.summary, str)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.user_metadata.HasField("summary")
    ]
    assert summaries == [
        "weather-model · step 1",
        'lookup(city="Oslo", days=3)',
        "weather-model · step 2",
    ]


async def test_a_worker_registers_the_search_attributes_on_a_fresh_server(tmp_path: Path) -> None:
    server = DevServerProcess(db_path=tmp_path / "fresh.db", port=free_port(), search_attributes=())
    await server.start()
    try:
        plain = await Client.connect(server.address)
        assert await registered_search_attributes(plain) == frozenset()
        released.set()
        async with towline_worker(plain, [agent]) as (tclient, queue):
            result = await run(tclient, agent, "weather?", task_queue=queue)
        # all that fit SQL visibility (three Int slots: TowlineCostMicros does not fit)
        assert await registered_search_attributes(plain) == {k.name for k in SQL_VISIBILITY_KEYS}
        query = f'WorkflowId = "{result.run_id}" AND TowlineStatus = "succeeded"'
        found: list[str] = []
        for _ in range(100):
            found = [w.id async for w in plain.list_workflows(query)]
            if found:
                break
            await asyncio.sleep(0.1)
        assert found == [result.run_id]
    finally:
        await server.stop()
