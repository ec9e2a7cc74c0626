"""An agent for the `towline serve` tests: it streams slowly, and launches only with approval.

Its offline model reads the conversation's last user message:
- `count`: counts to eight, a word every `PACE` seconds (a stream a page can reload in);
- `launch TARGET`: says it launches, calls `launch(target=TARGET)` (which waits for an
  approval), then reports what the call returned (or that it was denied);
- `ask QUESTION`: calls `ask_in_browser(question=QUESTION)`, the page's front-end tool (a
  client tool of the run, from the AG-UI input's `tools`), then says what the person answered;
- anything else: answers `You said: MESSAGE`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from towline import Agent, ModelSettings, ToolCallPart, tool
from towline.capabilities import ToolApproval
from towline.messages import Message, ModelRequest, ToolReturnPart, UserPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "COUNT", "PACE"]

COUNT = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
PACE = 0.4
"""Seconds per counted word."""


@tool
def launch(target: str) -> str:
    """Launch something (a human approves every launch)."""
    return f"{target} is in orbit"


def _last_prompt(messages: list[Message]) -> tuple[str, list[ToolReturnPart]]:
    """The last user message, and the tool returns that came after it."""
    start = max(i for i, m in enumerate(messages)
                if isinstance(m, ModelRequest) and any(isinstance(p, UserPart) for p in m.parts))
    prompt = " ".join(p.text for p in messages[start].parts if isinstance(p, UserPart))
    returns = [p for m in messages[start:] if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, ToolReturnPart)]
    return prompt.strip(), returns


async def _answer(messages: list[Message], info: ModelInfo) -> AsyncIterator[str | ToolCallPart]:
    prompt, returns = _last_prompt(messages)
    if prompt.startswith("count"):
        for i, word in enumerate(COUNT):
            await asyncio.sleep(PACE)
            yield word if i == 0 else f" {word}"
    elif prompt.startswith("ask ") and not returns:
        yield ToolCallPart(tool_name="ask_in_browser", tool_call_id="ask_1",
                           args={"question": prompt.removeprefix("ask ")})
    elif prompt.startswith("ask "):
        yield f"You answered: {returns[-1].content}"
    elif prompt.startswith("launch ") and not returns:
        yield f"Launching {prompt.removeprefix('launch ')}."
        target = prompt.removeprefix("launch ")  # call ids of its own: the same screenshots
        yield ToolCallPart(tool_name="launch", tool_call_id=f"launch_{target}", args={"target": target})
    elif returns:
        last = returns[-1]
        yield f"Launched: {last.content}" if last.status == "succeeded" else f"Not launched ({last.status})."
    else:
        yield f"You said: {prompt}"


agent = Agent(
    name="serve-web", model=FunctionModel(_answer, model_name="serve-offline"),
    tools=[launch], capabilities=[ToolApproval(tools=["launch"])],
    settings=ModelSettings(stream=True),
)
"""Streams its answers; every `launch` waits for a human."""
