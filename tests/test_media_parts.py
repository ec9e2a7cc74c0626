"""Images and documents in prompts and tool returns, through the engine.

A prompt may be a list of text and media parts (`ImageUrl`, `DocumentUrl`,
`BinaryContent`), given to `towline.client.run`, as raw JSON to
`start_workflow("AgentRun", ...)` (bytes as base64), or sent to a session. A tool may
return media parts too. Each reaches the model's next request intact, across the
tool activity, history and continue-as-new; providers find them with `media_in`.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns
from towline import Agent, tool
from towline.client import run, start_run
from towline.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    Message,
    ModelRequest,
    UserPart,
    media_in,
)
from towline.models import ModelInfo
from towline.results import RunInput
from towline.testing import run_to_end, towline_worker
from towline.tools import ToolResult
from towline.workflows import SendInput

PNG_B64 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
           "rkJggg==")
PNG = base64.b64decode(PNG_B64)
"""A 1x1 PNG."""
PHOTO = ImageUrl(url="https://example.com/oslo.jpg")
REPORT = DocumentUrl(url="https://example.com/report.pdf", media_type="application/pdf")


@tool
def chart(city: str) -> list[Any]:
    """A chart of the weather in `city`: a caption, the image and its data."""
    return [f"a chart of {city}", BinaryContent(data=PNG, media_type="image/png"), {"rows": 3}]


@tool
def sources() -> ToolResult:
    """A photo and a report, by URL."""
    return ToolResult(content=[PHOTO, REPORT])


def _describe(messages: list[Message], info: ModelInfo) -> str:
    """What the last prompt held, one word per item."""
    prompt = next(p for m in reversed(messages) if isinstance(m, ModelRequest)
                  for p in m.parts if isinstance(p, UserPart))
    rest, media = media_in(prompt.content)
    sizes = [len(m.data) if isinstance(m, BinaryContent) else m.url for m in media]
    return f"{rest} {sizes}"


TOOLS = Script([calls(call("chart", {"city": "Oslo"}), call("sources")), "seen"])
PROMPTS = Script([_describe, _describe])

TOOLS_AGENT = Agent(name="media-tools", model=TOOLS.model, tools=[chart, sources])
PROMPT_AGENT = Agent(name="media-prompt", model=PROMPTS.model)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    """One worker for every agent of this module."""
    async with towline_worker(client, [TOOLS_AGENT, PROMPT_AGENT]) as pair:
        yield pair


async def test_tool_media_reach_the_next_request_across_continue_as_new(
    worker: tuple[Client, str],
) -> None:
    tclient, queue = worker
    inp = RunInput(agent=TOOLS_AGENT.name, prompt="show me", continue_as_new_after_events=10)
    result, executions = await run_to_end(tclient, inp, task_queue=queue, id=f"media-{queue}")
    assert len(executions) == 2  # the second request was made by the continued execution
    assert result.output == "seen"
    chart_return, sources_return = returns(TOOLS.seen[1].messages)
    # the model sees each return as its other items and its media parts, bytes intact
    assert media_in(chart_return.content) == (
        ["a chart of Oslo", {"rows": 3}], [BinaryContent(data=PNG, media_type="image/png")])
    assert media_in(sources_return.content) == ([], [PHOTO, REPORT])
    # in history the bytes are base64 text
    recorded = returns(result.messages)[0].content
    assert recorded[1] == {"kind": "binary", "data": PNG_B64, "media_type": "image/png"}
    assert_paired(result)


async def test_a_list_prompt_through_run(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    prompt = ["what is this?", BinaryContent(data=PNG, media_type="image/png"), PHOTO]
    result = await run(tclient, PROMPT_AGENT, prompt, task_queue=queue)
    assert result.output == f"['what is this?'] [{len(PNG)}, '{PHOTO.url}']"
    first = result.messages[0]
    assert isinstance(first, ModelRequest)
    assert first.parts == [UserPart(content=prompt)]  # one user part holding the list


async def test_a_list_prompt_as_raw_json(client: Client, worker: tuple[Client, str]) -> None:
    """What the `temporal` CLI or another language's client sends: JSON, bytes as base64."""
    _, queue = worker
    raw = {"agent": PROMPT_AGENT.name,
           "prompt": ["look", {"kind": "binary", "data": PNG_B64, "media_type": "image/png"}]}
    handle = await client.start_workflow("AgentRun", raw, id=f"media-raw-{queue}",
                                         task_queue=queue)
    result: Any = await handle.result()
    assert result["output"] == f"['look'] [{len(PNG)}]"


async def test_send_takes_a_list(worker: tuple[Client, str]) -> None:
    tclient, queue = worker
    handle = await start_run(tclient, PROMPT_AGENT, "hello", task_queue=queue, session=True)
    answer = await handle.execute_update(
        "send", SendInput(content=["and this?", BinaryContent(data=PNG, media_type="image/png")]))
    assert answer == f"['and this?'] [{len(PNG)}]"
    await handle.signal("end")
    result = await handle.result()
    assert result.output == answer
