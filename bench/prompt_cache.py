"""What Anthropic prompt caching saves an agent loop: a 20-step tool loop, caching on and off.

Runs the same agent twice on a real dev server (in memory) with the real
`anthropic` SDK against the local fake Messages API of the provider tests
(`tests/providers/fake_server.py`, with `anthropic_rules.py` enforcing the
API's rules and reporting its usage): once with `ModelSettings.prompt_cache`
on (the default: breakpoints on the tools, the system prompt and the newest
message), once off. The fake counts tokens at about four characters a token
and caches as the API does: a prefix is written at a breakpoint (1024 tokens
at least) and read back by a later request whose breakpoint finds it within
20 blocks, so each step reads the previous step's prompt and writes only its
new part. Responses are priced by `genai-prices` as `claude-sonnet-4-6`.

    python bench/prompt_cache.py             # prints a table
    python bench/prompt_cache.py --json      # machine-readable
    python bench/prompt_cache.py --steps 40  # a longer loop

Prints, for each variant: input tokens, tokens read from and written to the
cache, the run's cost, and the cost of the same tokens all priced at the full
input rate (what the run would cost if nothing were cached).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "providers")]

# the fake provider of the tests (tests/providers is put on the path above)
from anthropic_rules import AnthropicRules  # pyright: ignore[reportMissingImports]
from fake_server import FakeProvider  # pyright: ignore[reportMissingImports]
from harness import leave
from temporalio.client import Client

from towline import Agent, Limits, ModelSettings, tool
from towline.activities.providers._common import priced
from towline.activities.providers.anthropic import AnthropicModel
from towline.client import run
from towline.devserver import start_dev_server
from towline.messages import Usage
from towline.testing import towline_worker

MODEL = "claude-sonnet-4-6"
PRICES = {"provider_id": "anthropic"}

INSTRUCTIONS = "You are the records clerk. " + " ".join(
    f"Rule {n}: check record fields against the ledger, quote the field names exactly, and say "
    f"which ones disagree." for n in range(1, 61))
"""A long system prompt (about 1,500 tokens), as real agents have."""


@tool
def lookup(n: int) -> str:
    """Look up record `n` in the ledger."""
    return f"record {n}: " + ", ".join(f"field_{k}={n * k}" for k in range(40))


def script(rules: AnthropicRules, steps: int) -> list[Any]:
    """`steps` model answers: a lookup per step, then the summary."""
    calls = [rules.answer([{"type": "text", "text": f"Checking record {n}."},
                           {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "lookup", "input": {"n": n}}],
                          "tool_use", output_tokens=30) for n in range(1, steps)]
    return [*calls, rules.answer([{"type": "text", "text": "All records agree."}], output_tokens=20)]


async def measure(client: Client, steps: int, cache: bool) -> dict[str, Any]:
    """One run of the loop; its usage and costs."""
    server = FakeProvider().start()
    try:
        rules = AnthropicRules()
        server.rules.append(rules)
        server.script(*script(rules, steps))
        model = AnthropicModel(model=MODEL, base_url=server.url, api_key="sk-bench-not-a-key",
                               price_provider="anthropic", model_name=f"bench-cache-{cache}")
        agent = Agent(name=f"bench-cache-{'on' if cache else 'off'}", model=model, tools=[lookup],
                      instructions=INSTRUCTIONS, settings=ModelSettings(prompt_cache=cache),
                      limits=Limits(max_steps=steps + 1))
        async with towline_worker(client, [agent]) as (tc, queue):
            result = await run(tc, agent, "Check every record.", task_queue=queue)
        assert result.output == "All records agree." and not server.refusals(), server.refusals()
        usage = result.usage
    finally:
        server.stop()
    full = priced(Usage(requests=usage.requests, input_tokens=usage.input_tokens,
                        output_tokens=usage.output_tokens), MODEL, PRICES)
    return {
        "prompt_cache": cache, "requests": usage.requests, "input_tokens": usage.input_tokens,
        "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
        "output_tokens": usage.output_tokens, "cost": round(usage.cost, 6),
        "cost_at_full_input_rate": round(full.cost, 6),
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="model requests in the loop")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    env = await start_dev_server(db_path=None, ui=False)
    try:
        rows = [await measure(env.client, args.steps, cache) for cache in (True, False)]
    finally:
        await env.shutdown()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    on, off = rows
    print(f"{args.steps}-step Anthropic tool loop ({MODEL} prices), fake Messages API with its prompt cache")
    print(f"{'':24}{'cache on':>14}{'cache off':>14}")
    for key, label in (("input_tokens", "input tokens"), ("cache_read_tokens", "  read from cache"),
                       ("cache_write_tokens", "  written to cache"), ("output_tokens", "output tokens")):
        print(f"{label:24}{on[key]:>14,}{off[key]:>14,}")
    print(f"{'cost (USD)':24}{on['cost']:>14.4f}{off['cost']:>14.4f}")
    print(f"{'  at full input rate':24}{on['cost_at_full_input_rate']:>14.4f}"
          f"{off['cost_at_full_input_rate']:>14.4f}")
    print(f"caching saves {1 - on['cost'] / off['cost']:.0%} of the run's cost "
          f"({on['cache_read_tokens'] / on['input_tokens']:.0%} of its input tokens read from the cache)")
    return 0


if __name__ == "__main__":
    leave(asyncio.run(main()))
