"""What images and thinking cost a run's Temporal history, measured on a dev server.

1. A 5 MB image (a PNG header, then random bytes: incompressible) in the prompt, through
   the file payload store: the model checks it got the image byte for byte and calls a
   tool that returns a 1 MB image too, then checks that and answers. Prints the run's
   history bytes (total, per event type, the largest event) and the store's bytes.
2. Thinking: a 20-step tool loop whose model returns, at every step, a `ThinkingPart`
   (~200 characters of text, a ~400-character signature) before its call, against the
   same loop without thinking. Prints the history bytes per step of each.

    python bench/media_payload.py              # a table
    python bench/media_payload.py --json       # machine-readable
    python bench/media_payload.py --image-mb 3 # another image size

No network and no key: the models are `FunctionModel`s.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import uuid
from pathlib import Path
from typing import Any

from harness import finish
from histories import REFERENCE, event_bytes, executions, payloads_in, per_execution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from towline import Agent, Limits, tool
from towline.client import start_run
from towline.devserver import start_dev_server
from towline.messages import (
    BinaryContent,
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
    media_in,
)
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

PNG = b"\x89PNG\r\n\x1a\n"
THOUGHT = ("The user wants the running total. I have the previous notes; the next step is to "
           "record this one with the note tool, then check whether the loop is done. Nothing "
           "suggests a different tool here, so: note it.")[:200]
SIGNATURE = (hashlib.sha512(b"towline").hexdigest() * 4)[:400]


def _image(n: int, seed: bytes) -> bytes:
    """`n` incompressible bytes that start as a PNG does (repeatable: seeded)."""
    block = hashlib.sha512(seed).digest()
    out = bytearray(PNG)
    while len(out) < n:
        block = hashlib.sha512(block).digest()
        out += block
    return bytes(out[:n])


# --- 1. a large image through the payload store ------------------------------------------------


def stored_by_event_type(events: list[HistoryEvent]) -> dict[str, int]:
    """Bytes the store holds for each event type's payloads (what their references point to)."""
    found: dict[str, int] = {}
    for e in events:
        kind = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
        for p in payloads_in(e):
            if p.metadata.get("messageType") == REFERENCE:
                found[kind] = found.get(kind, 0) + sum(x.size_bytes for x in p.external_payloads)
    return found


def media_agent(image: bytes, crop: bytes) -> Agent:
    """Checks the prompt's image, asks for a crop (an image a tool returns), checks that too."""

    @tool
    def crop_image(x: int, y: int) -> list[str | BinaryContent]:
        """A crop of the image around (x, y)."""
        return [f"crop at {x},{y}", BinaryContent(data=crop, media_type="image/png")]

    def look(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        first = messages[0]
        assert isinstance(first, ModelRequest)
        prompt = next(p for p in first.parts if isinstance(p, UserPart))
        _, given = media_in(prompt.content)
        assert [g.data for g in given if isinstance(g, BinaryContent)] == [image], "no image"
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
                   if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(tool_name="crop_image", args={"x": 1, "y": 2},
                                                     tool_call_id="crop")])
        _, cropped = media_in(returns[0].content)
        assert [c.data for c in cropped if isinstance(c, BinaryContent)] == [crop], "no crop"
        return f"saw a {len(image)}-byte image and a {len(crop)}-byte crop"

    return Agent(name="media-bench", model=FunctionModel(look, model_name="looker"),
                 tools=[crop_image])


async def image_run(client: Client, image_mb: float, store: Path) -> dict[str, Any]:
    image = _image(int(image_mb * 1_000_000), b"image")
    crop = _image(1_000_000, b"crop")
    agent = media_agent(image, crop)
    async with towline_worker(client, [agent], payload_store=f"file://{store}") as (tc, queue):
        wid = f"media-{uuid.uuid4().hex[:8]}"
        handle = await start_run(tc, agent, ["What is in this image?",
                                             BinaryContent(data=image, media_type="image/png")],
                                 task_queue=queue, id=wid)
        result = await handle.result()
    [events] = await executions(client, wid)
    files = [f for f in store.rglob("*") if f.is_file()]
    return {
        "image_bytes": len(image), "tool_image_bytes": len(crop), "output": result.output,
        "history_bytes": sum(e.ByteSize() for e in events), "history_events": len(events),
        "largest_event_bytes": max(e.ByteSize() for e in events),
        "bytes_by_event_type": dict(sorted(event_bytes(events).items(), key=lambda kv: -kv[1])),
        "store_bytes": sum(f.stat().st_size for f in files), "store_objects": len(files),
        "store_object_bytes": sorted((f.stat().st_size for f in files), reverse=True),
        "referenced_bytes_by_event_type": stored_by_event_type(events),
    }


# --- 2. thinking, per step -------------------------------------------------------------------


@tool
def note(n: int) -> str:
    """Record step `n`."""
    return f"noted {n}"


def loop_agent(steps: int, thinking: bool) -> Agent:
    """Calls `note` at every step until the last, which answers; thinking first if asked."""

    def step(messages: list[Message], info: ModelInfo) -> ModelResponse:
        thought: list[Any] = [ThinkingPart(content=THOUGHT, signature=SIGNATURE,
                                           provider="anthropic")] if thinking else []
        if info.run_step < steps:
            call = ToolCallPart(tool_name="note", args={"n": info.run_step},
                                tool_call_id=f"n{info.run_step}")
            return ModelResponse(parts=[*thought, call])
        return ModelResponse(parts=[*thought, TextPart(content="done")])

    name = "loop-thinking" if thinking else "loop-plain"
    return Agent(name=name, model=FunctionModel(step, model_name=name), tools=[note],
                 limits=Limits(max_steps=steps + 1))


async def loop_run(client: Client, steps: int, thinking: bool) -> dict[str, Any]:
    agent = loop_agent(steps, thinking)
    async with towline_worker(client, [agent]) as (tc, queue):
        wid = f"{agent.name}-{uuid.uuid4().hex[:8]}"
        handle = await start_run(tc, agent, "go", task_queue=queue, id=wid)
        await handle.result()
    chain = await executions(client, wid)
    [row] = per_execution(chain)
    return {"thinking": thinking, "steps": row["steps"], "history_bytes": row["bytes"],
            "events": row["events"], "bytes_per_step": row["bytes_per_step"]}


async def measure(image_mb: float, steps: int) -> dict[str, Any]:
    env = await start_dev_server(db_path=None, ui=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            image = await image_run(env.client, image_mb, Path(tmp) / "payloads")
        loops = [await loop_run(env.client, steps, thinking) for thinking in (False, True)]
    finally:
        await env.shutdown()
    return {"image": image, "thinking": loops}


def table(found: dict[str, Any]) -> str:
    image = found["image"]
    sizes = ", ".join(f"{n:,}" for n in image["store_object_bytes"])
    lines = [
        (f"1. A {image['image_bytes']:,}-byte image in the prompt, a "
         f"{image['tool_image_bytes']:,}-byte image from a tool (file payload store)"),
        f"   answer: {image['output']}",
        (f"   history: {image['history_bytes']:,} bytes in {image['history_events']} events "
         f"(largest event {image['largest_event_bytes']:,} bytes)"),
        *(f"     {kind:<40} {size:>9,}" for kind, size in image["bytes_by_event_type"].items()),
        (f"   payload store: {image['store_bytes']:,} bytes in {image['store_objects']} objects "
         f"({sizes}); the history's references point at:"),
        *(f"     {kind:<40} {size:>11,}"
          for kind, size in image["referenced_bytes_by_event_type"].items()),
        "",
        (f"2. Thinking ({len(THOUGHT)} characters of text, a {len(SIGNATURE)}-character "
         "signature per step)"),
        "   thinking  steps  events  history bytes  bytes per step",
    ]
    lines += [f"   {'on' if row['thinking'] else 'off':<9} {row['steps']:>5}  {row['events']:>6}  "
              f"{row['history_bytes']:>13,}  {row['bytes_per_step']:>14,}"
              for row in found["thinking"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="What images and thinking cost a run's history.")
    parser.add_argument("--image-mb", type=float, default=5.0, help="image size (default 5 MB)")
    parser.add_argument("--steps", type=int, default=20, help="steps of the loops (default 20)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    finish(asyncio.run(measure(args.image_mb, args.steps)), args.json, table)


if __name__ == "__main__":
    main()
