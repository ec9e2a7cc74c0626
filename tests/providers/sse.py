"""Each provider's streaming wire format: a scripted answer sent as server-sent events.

A request with `"stream": true` gets its scripted reply (the API's non-streamed
answer) cut into the events the provider streams for that answer, in the
provider's exact shapes: Chat Completions chunks (`data: {chunk}` lines, the
usage chunk, `data: [DONE]`), Responses API events (`event: response.…`), and
Anthropic Messages events (`message_start`, content block start/delta/stop,
`message_delta`, `message_stop`). Text and argument strings are cut in
pieces of `PIECE` characters, so a test sees the text arrive in several deltas.
"""

from __future__ import annotations

import copy
import json
from typing import Any

__all__ = ["sse_events", "encode", "pieces", "PIECE", "chat_chunks", "responses_events",
           "anthropic_events"]

PIECE = 6
"""Characters per text delta."""

Event = tuple[str | None, Any]
"""An SSE event: its `event:` name (None: none) and its `data:` (JSON, or `[DONE]`)."""


def pieces(text: str, size: int = PIECE) -> list[str]:
    """`text` in pieces of `size` characters."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def encode(event: Event) -> bytes:
    """One event on the wire."""
    name, data = event
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {text}\n\n".encode()


def sse_events(path: str, body: Any) -> list[Event]:
    """The events a provider streams for the answer `body` to a request on `path`."""
    path = path.split("?", 1)[0]  # Azure adds `?api-version=...`
    if path.endswith("/chat/completions"):
        return chat_chunks(body)
    if path.endswith("/responses"):
        return responses_events(body)
    if path.endswith("/messages"):
        return anthropic_events(body)
    raise ValueError(f"no streaming format for {path}")


def chat_chunks(completion: dict[str, Any]) -> list[Event]:
    """Chat Completions: role, thinking (`reasoning_content`, as vLLM and DeepSeek stream it),
    content and tool-call deltas, finish, usage, `[DONE]`."""
    base = {k: completion[k] for k in ("id", "created", "model") if k in completion}
    base["object"] = "chat.completion.chunk"
    base["system_fingerprint"] = "fp_test"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                           "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    if message.get("reasoning_content"):
        out += [chunk({"reasoning_content": p}) for p in pieces(message["reasoning_content"])]
    if message.get("content"):
        out += [chunk({"content": p}) for p in pieces(message["content"])]
    for i, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in pieces(call["function"]["arguments"])]
    out.append(chunk({}, choice["finish_reason"]))
    out.append((None, {**base, "choices": [], "usage": completion["usage"]}))
    out.append((None, "[DONE]"))
    return out


def responses_events(response: dict[str, Any]) -> list[Event]:
    """Responses API: created, each output item with its deltas (a reasoning item's summary
    parts in `response.reasoning_summary_text.delta`s), then completed (or incomplete, or
    failed, by the response's status), as real streams are."""
    seq = 0
    out: list[Event] = []

    def event(kind: str, **fields: Any) -> None:
        nonlocal seq
        out.append((kind, {"type": kind, "sequence_number": seq, **fields}))
        seq += 1

    started = {**copy.deepcopy(response), "status": "in_progress", "output": [], "usage": None}
    event("response.created", response=started)
    event("response.in_progress", response=started)
    for index, item in enumerate(response.get("output") or []):
        if item["type"] == "message":
            event("response.output_item.added", output_index=index,
                  item={**item, "status": "in_progress", "content": []})
            for c, part in enumerate(item.get("content") or []):
                text = part.get("text", "")
                event("response.content_part.added", item_id=item["id"], output_index=index,
                      content_index=c, part={**part, "text": ""})
                for p in pieces(text):
                    event("response.output_text.delta", item_id=item["id"], output_index=index,
                          content_index=c, delta=p, logprobs=[])
                event("response.output_text.done", item_id=item["id"], output_index=index,
                      content_index=c, text=text, logprobs=[])
                event("response.content_part.done", item_id=item["id"], output_index=index,
                      content_index=c, part=part)
        elif item["type"] == "reasoning":
            event("response.output_item.added", output_index=index,
                  item={**item, "summary": [], "encrypted_content": None})
            for s, part in enumerate(item.get("summary") or []):
                event("response.reasoning_summary_part.added", item_id=item["id"],
                      output_index=index, summary_index=s, part={**part, "text": ""})
                for p in pieces(part["text"]):
                    event("response.reasoning_summary_text.delta", item_id=item["id"],
                          output_index=index, summary_index=s, delta=p)
                event("response.reasoning_summary_text.done", item_id=item["id"],
                      output_index=index, summary_index=s, text=part["text"])
                event("response.reasoning_summary_part.done", item_id=item["id"],
                      output_index=index, summary_index=s, part=part)
        elif item["type"] == "function_call":
            event("response.output_item.added", output_index=index,
                  item={**item, "arguments": "", "status": "in_progress"})
            for p in pieces(item["arguments"]):
                event("response.function_call_arguments.delta", item_id=item.get("id", ""),
                      output_index=index, delta=p)
            event("response.function_call_arguments.done", item_id=item.get("id", ""),
                  output_index=index, arguments=item["arguments"], name=item["name"])
        event("response.output_item.done", output_index=index, item=item)
    # the last event names how the response ended (real streams end an `incomplete` one
    # with `response.incomplete`, not `response.completed`)
    status = response.get("status") or "completed"
    event(f"response.{status if status in ('incomplete', 'failed') else 'completed'}",
          response=response)
    return out


def anthropic_events(message: dict[str, Any]) -> list[Event]:
    """Anthropic Messages: message_start, each content block (text, thinking and tool input
    in deltas, a thinking block's signature in a `signature_delta`), message_delta, message_stop."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    out: list[Event] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}}))
            out += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "text_delta", "text": p}})
                    for p in pieces(block["text"])]
        elif block["type"] == "thinking":  # the text in deltas, then its signature
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "thinking", "thinking": "",
                                                                  "signature": ""}}))
            out += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "thinking_delta", "thinking": p}})
                    for p in pieces(block["thinking"])]
            out.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "signature_delta",
                                                          "signature": block["signature"]}}))
        elif block["type"] == "tool_use":
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {**block, "input": {}}}))
            out += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "input_json_delta", "partial_json": p}})
                    for p in pieces(json.dumps(block["input"]))]
        else:  # a block sent whole (redacted_thinking)
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": block}))
        if index == 0:  # real streams send their ping early, after the first block starts
            out.insert(2, ("ping", {"type": "ping"}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": message["stop_reason"],
                                            "stop_sequence": message.get("stop_sequence")},
                                  "usage": {"output_tokens": usage["output_tokens"]}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out
