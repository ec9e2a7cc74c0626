"""Agents for the frontier CLI tests (`tests/` on PYTHONPATH): a model that thinks before it
answers, streaming or not, and one that reports the attachments it was given."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from towline import Agent, ModelSettings, tool
from towline.messages import (
    BinaryContent,
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPart,
    media_in,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["thinker", "stream_thinker", "looker", "snapper", "SIGNATURE", "FIRST_THOUGHT",
           "attachment_line", "SNAPSHOT"]

SIGNATURE = "EqQBCkgIARABGAIiQL" + "s" * 60 + "==end"
"""An opaque signature, as long as a real one starts to be."""
FIRST_THOUGHT = "The user asks for 6 times 7. I should call multiply rather than guess."


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def _think(messages: list[Message], info: ModelInfo) -> ModelResponse:
    if info.run_step == 1:
        return ModelResponse(parts=[
            ThinkingPart(content=FIRST_THOUGHT, signature=SIGNATURE, provider="anthropic"),
            ToolCallPart(tool_name="multiply", args={"a": 6, "b": 7}, tool_call_id="m1")])
    return ModelResponse(parts=[
        ThinkingPart(content="multiply returned 42.", signature=SIGNATURE, provider="anthropic"),
        ThinkingPart(signature="cmVkYWN0ZWQ=", redacted=True, provider="anthropic"),
        TextPart(content="6 times 7 is 42.")])


thinker = Agent(name="thinker", model=FunctionModel(_think, model_name="thinker"),
                tools=[multiply])
"""Thinks before each step (no streaming): a call to `multiply`, then the answer."""


def _stream(messages: list[Message], info: ModelInfo) -> Iterator[str | ThinkingPart]:
    yield ThinkingPart(content="Let me think.\nIt is 42.", signature=SIGNATURE, provider="google")
    yield "The answer"
    yield " is 42."


stream_thinker = Agent(name="stream-thinker", model=FunctionModel(_stream, model_name="streamer"),
                       settings=ModelSettings(stream=True))
"""Streams a thought of two lines, then its answer."""


def attachment_line(part: BinaryContent) -> str:
    """How `looker` reports an attachment: its type, size and digest."""
    return f"{part.media_type}, {len(part.data)} bytes, sha256 {hashlib.sha256(part.data).hexdigest()[:16]}"


def _look(messages: list[Message], info: ModelInfo) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    prompt = next(p for p in first.parts if isinstance(p, UserPart))
    seen = [attachment_line(m) for m in media_in(prompt.content)[1] if isinstance(m, BinaryContent)]
    return "; ".join(seen) or "no attachment"


looker = Agent(name="looker", model=FunctionModel(_look, model_name="looker"))
"""Answers with the type, size and digest of each file attached to its prompt."""


SNAPSHOT = b"\x89PNG\r\n\x1a\n" + bytes(200_000)
"""The picture `snapshot` returns."""


@tool
def snapshot(camera: int) -> list[str | BinaryContent]:
    """The latest picture of a camera, with its caption."""
    return [f"camera {camera}", BinaryContent(data=SNAPSHOT, media_type="image/png")]


def _snap(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="snapshot", args={"camera": 1},
                                                 tool_call_id="s1")])
    return "I see the picture."


snapper = Agent(name="snapper", model=FunctionModel(_snap, model_name="snapper"), tools=[snapshot])
"""Asks for a camera's picture (a tool that returns an image), then answers."""
