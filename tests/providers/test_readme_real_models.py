"""The README's "Real models" commands, run exactly as written, with each provider's endpoint
pointed at a local server speaking its wire format (the commands read the environment)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from anthropic_replies import message
from fake_server import FakeProvider, Reply
from openai_replies import completion
from readme import Done, cli_env, readme

Command = Callable[[dict[str, str]], Awaitable[Done]]
"""Runs one README command (written out literally, so the README check can see it)."""

COMMANDS: dict[str, Command] = {
    "openai": lambda env: readme(
        'OPENAI_API_KEY=sk-... towline run examples.research:agent "What does https://example.com say?" --model openai:gpt-4.1-mini',
        env=env, timeout=120),
    "openai-responses": lambda env: readme(
        'OPENAI_API_KEY=sk-... towline run examples.research:agent "What does https://example.com say?" --model openai-responses:gpt-4.1-mini',
        env=env, timeout=120),
    "anthropic": lambda env: readme(
        'ANTHROPIC_API_KEY=sk-ant-... towline run examples.research:agent "What does https://example.com say?" --model anthropic:claude-sonnet-4-6',
        env=env, timeout=120),
    "ollama": lambda env: readme(
        'towline run examples.research:agent "What does https://example.com say?" --model ollama:llama3.2',
        env=env, timeout=120),
    "towline-model": lambda env: readme(
        'TOWLINE_MODEL=openai:gpt-4.1-mini OPENAI_API_KEY=sk-... towline run examples.research:agent "Summarise README.md"',
        env=env, timeout=120),
}


@pytest.mark.parametrize(("command", "reply", "path", "model"), [
    ("openai",
     completion("It says: Example Domain."), "/v1/chat/completions", "gpt-4.1-mini"),
    ("openai-responses",
     {"id": "r", "object": "response", "created_at": 1, "status": "completed",
      "model": "gpt-4.1-mini", "output": [{"type": "message", "id": "m", "role": "assistant",
      "status": "completed", "content": [{"type": "output_text", "text": "It says: Example Domain.",
                                          "annotations": []}]}],
      "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
      "usage": {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10}},
     "/v1/responses", "gpt-4.1-mini"),
    ("anthropic",
     message([{"type": "text", "text": "It says: Example Domain."}]), "/v1/messages", "claude-sonnet-4-6"),
    ("ollama",
     completion("It says: Example Domain.", model="llama3.2"), "/v1/chat/completions", "llama3.2"),
    ("towline-model",
     completion("README.md describes towline."), "/v1/chat/completions", "gpt-4.1-mini"),
], ids=["openai", "openai-responses", "anthropic", "ollama", "towline-model"])
async def test_real_model_commands(
    provider: FakeProvider, target: str, namespace: str, command: str, reply: dict[str, object],
    path: str, model: str,
) -> None:
    provider.script(Reply(reply))
    env = cli_env(target, namespace, {
        "OPENAI_BASE_URL": f"{provider.url}/v1", "ANTHROPIC_BASE_URL": provider.url,
        "OLLAMA_BASE_URL": f"{provider.url}/v1"})
    done = await COMMANDS[command](env)
    assert done.code == 0, done.err
    assert "Example Domain" in done.out or "describes towline" in done.out
    [request] = provider.requests
    assert (request.path, request.body["model"]) == (path, model)
