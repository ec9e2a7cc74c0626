"""A research assistant that fetches web pages and reads local files to answer a question.

Useful with a real model, and still runs offline:

    towline run examples.research:agent "Summarise https://example.com"            # offline
    TOWLINE_MODEL=openai:gpt-4.1-mini towline run examples.research:agent "..."      # real model
    towline run examples.research:agent "..." --model anthropic:claude-sonnet-4-6  # one run

Two real tools: `fetch_url` (an HTTP GET with httpx; idempotent, so Temporal may retry
it) and `read_file` (a file on the worker's disk). Reading files is the risky one —
whatever it reads goes to the model's provider, and a fetched page could try to talk
the model into reading secrets — so `ToolApproval` makes every `read_file` call wait
for a human (`towline approve WORKFLOW_ID CALL_ID`, or reject).

`TOWLINE_MODEL` (read when this module is imported, on the worker and the CLI alike)
chooses the model: any provider string (`openai:...`, `openai-responses:...`,
`anthropic:...`, `ollama:...`). Unset, the agent uses `offline_researcher`, a
`FunctionModel` that calls the tools on the URLs and paths in the prompt and reports
what it found, so the example works with no key and no network but the page's.

The agent streams (`ModelSettings(stream=True)`): `towline run` shows the model's text
as it is written and each tool call as it starts and ends, and `towline watch` shows the
same from another terminal. The offline model streams too: it writes its answer a few
words at a time, as a real model would.

`native_agent` (`python examples/research.py --native "..."`) searches with the provider's
own web search instead (`WebSearch`, a native tool: the provider runs it inside its
response; no `fetch_url`, nothing runs on the worker but the model call). With `--model`
it is a real provider's (OpenAI Responses, Anthropic, Gemini); offline, `offline_searcher`
stands in: it emits a native tool call and its result as a provider would, a search it
cannot make (no network), and says so, citing where the search would have gone.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote_plus

import httpx

from towline import Agent, ModelSettings, ToolError, WebSearch, tool
from towline.capabilities import ToolApproval
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "native_agent", "fetch_url", "read_file", "offline_researcher", "offline_searcher",
           "research_step", "MODEL", "NATIVE_MODEL", "main"]

MAX_CHARS = 20_000
"""Characters a tool returns at most (a page or a file can be huge; the model's window is not)."""

INSTRUCTIONS = (
    "You are a careful research assistant. Use fetch_url to read web pages and read_file to "
    "read local files named in the question; cite the URLs and paths you used. If a tool "
    "fails or is denied, say so instead of guessing."
)


def page_text(markup: str) -> str:
    """The readable text of an HTML page: scripts, styles and tags removed, spaces squeezed."""
    markup = re.sub(r"(?is)<(script|style|noscript)\b.*?</\1>", " ", markup)
    text = html.unescape(re.sub(r"(?s)<[^>]+>", " ", markup))
    return re.sub(r"\s+", " ", text).strip()


@tool(idempotent=True, start_to_close_timeout=timedelta(seconds=60))
async def fetch_url(url: str) -> str:
    """Fetch a web page (http or https) and return its text, at most 20,000 characters."""
    if not url.startswith(("http://", "https://")):
        raise ToolError(f"not an http(s) URL: {url}")
    try:
        async with httpx.AsyncClient(follow_redirects=True, timeout=30) as client:
            response = await client.get(url, headers={"user-agent": "towline-research/0.1"})
    except httpx.HTTPError as e:
        raise ToolError(f"fetching {url} failed: {type(e).__name__}") from None
    if response.status_code >= 400:
        raise ToolError(f"fetching {url} failed: HTTP {response.status_code}")
    kind = response.headers.get("content-type", "")
    text = page_text(response.text) if "html" in kind else response.text
    return text[:MAX_CHARS]


@tool
def read_file(path: str) -> str:
    """Read a local text file and return its content, at most 20,000 characters."""
    try:
        return Path(path).expanduser().read_text(errors="replace")[:MAX_CHARS]
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror or type(e).__name__}") from None


_URL = re.compile(r"https?://[^\s<>\"')]+")
_PATH = re.compile(r"(?<![\w/:])(?:~|\.{1,2})?/?(?:[\w.-]+/)*[\w.-]+\.(?:md|txt|py|json|toml|yaml|yml|csv|rst)\b")


PACE = 0.04
"""Seconds the offline model takes per word it writes (so its answer streams visibly)."""


async def offline_researcher(
    messages: list[Message], info: ModelInfo
) -> AsyncIterator[str | ToolCallPart]:
    """The offline model, streaming: its answer a few words at a time, then its tool calls."""
    decided = research_step(messages)
    text = decided if isinstance(decided, str) else decided.text
    for word in re.findall(r"\S+\s*", text):
        await asyncio.sleep(PACE)
        yield word
    if not isinstance(decided, str):
        for call in decided.tool_calls:
            yield call


def research_step(messages: list[Message]) -> ModelResponse | str:
    """What the offline model says: fetch the prompt's URLs and read its file paths, then
    report what came back."""
    start = max(i for i, m in enumerate(messages)
                if isinstance(m, ModelRequest) and any(isinstance(p, UserPart) for p in m.parts))
    prompt = " ".join(p.text for p in messages[start].parts if isinstance(p, UserPart))
    returns = [p for m in messages[start:] if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, ToolReturnPart)]
    if not any(isinstance(m, ModelResponse) and m.tool_calls for m in messages[start:]):
        urls = [u.rstrip(".,;") for u in _URL.findall(prompt)]
        rest = _URL.sub(" ", prompt)
        paths = [p.rstrip(".,;") for p in _PATH.findall(rest)]
        calls = [ToolCallPart(tool_name="fetch_url", args={"url": u}, tool_call_id=f"fetch_{i}")
                 for i, u in enumerate(urls)]
        calls += [ToolCallPart(tool_name="read_file", args={"path": p}, tool_call_id=f"read_{i}")
                  for i, p in enumerate(paths)]
        if calls:
            return ModelResponse(parts=[TextPart(content="Let me look."), *calls],
                                 finish_reason="tool_calls")
        return ("Give me a URL or a file path to research. (This is the offline model: set "
                "TOWLINE_MODEL, or pass --model, to use a real one.)")
    lines = ["Here is what I found:"]
    for r in returns:
        if r.status == "succeeded":
            text = str(r.content)
            lines.append(f"- {r.tool_name}: {len(text)} characters; it begins: {' '.join(text[:120].split())}")
        else:
            lines.append(f"- {r.tool_name}: {r.status}: {r.content}")
    return "\n".join(lines)


NATIVE_INSTRUCTIONS = (
    "You are a careful research assistant. Search the web for what the question needs and "
    "cite the pages you used. If the search finds nothing useful, say so instead of guessing."
)
SEARCH_PAGE = "https://duckduckgo.com/?q="
"""Where the offline searcher says its search would have gone."""


async def offline_searcher(
    messages: list[Message], info: ModelInfo
) -> AsyncIterator[str | TextPart | NativeToolCallPart | NativeToolReturnPart]:
    """The offline model of `native_agent`, streaming: a web search as a provider reports one
    (a native call and its result, provider `offline`: never sent to a real provider), then
    an answer citing it. It has no network: its one result is the search's own address."""
    start = max(i for i, m in enumerate(messages)
                if isinstance(m, ModelRequest) and any(isinstance(p, UserPart) for p in m.parts))
    question = " ".join(p.text for p in messages[start].parts if isinstance(p, UserPart)).strip()
    if not any(t.kind == "web_search" for t in info.native_tools):
        yield "I have no web search in this request."
        return
    url = SEARCH_PAGE + quote_plus(question)
    yield NativeToolCallPart(tool_name="web_search", args={"query": question},
                             tool_call_id="offline_search_1", provider="offline")
    yield NativeToolReturnPart(tool_name="web_search", tool_call_id="offline_search_1",
                               provider="offline", content=[{"title": f"Search: {question}", "url": url}])
    text = (f"I searched the web for {question!r}, offline: this model has no network, so the "
            f"search found nothing to read. The search is at {url}. (Run it with --model to "
            "search for real.)")
    for word in re.findall(r"\S+\s*", text):
        await asyncio.sleep(PACE)
        yield word
    yield TextPart(content="", citations=[{"type": "search", "title": f"Search: {question}", "url": url}])


MODEL: str | FunctionModel = os.environ.get("TOWLINE_MODEL") or FunctionModel(
    offline_researcher, model_name="research-offline")
"""`TOWLINE_MODEL` (a provider string), else the offline stand-in."""

agent = Agent(
    name="research",
    model=MODEL,
    instructions=INSTRUCTIONS,
    tools=[fetch_url, read_file],
    capabilities=[ToolApproval(tools=["read_file"], timeout=timedelta(hours=1))],
    settings=ModelSettings(stream=True),
)

NATIVE_MODEL: str | FunctionModel = os.environ.get("TOWLINE_MODEL") or FunctionModel(
    offline_searcher, model_name="research-native-offline")
"""`TOWLINE_MODEL` (a provider string), else the offline stand-in for a searching model."""

native_agent = Agent(
    name="research-native",
    model=NATIVE_MODEL,
    instructions=NATIVE_INSTRUCTIONS,
    native_tools=[WebSearch()],
    settings=ModelSettings(stream=True),
)
"""The research assistant with the provider's own web search instead of `fetch_url`."""


def main(argv: list[str] | None = None) -> int:
    """`python examples/research.py [--native] QUESTION [--model MODEL]`: run the agent (the
    native one with `--native`) through `towline run`."""
    parser = argparse.ArgumentParser(description="Run the research agent (towline run "
                                     "examples.research:agent ...; --native: examples.research:native_agent).")
    parser.add_argument("question", help="what to research")
    parser.add_argument("--native", action="store_true",
                        help="search with the provider's own web search (a native tool)")
    parser.add_argument("--model", help="a real model, e.g. anthropic:claude-sonnet-4-6, "
                        "openai-responses:gpt-5, google:gemini-2.5-flash (its key in the environment)")
    args = parser.parse_args(argv)
    command = ["run", f"examples.research:{'native_agent' if args.native else 'agent'}", args.question]
    if args.model:
        command += ["--model", args.model]
    from towline.cli import run_cli

    return run_cli(command)


if __name__ == "__main__":
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)  # `examples.research` imports from any working directory
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK's runtime can abort at interpreter exit (sdk-python #300)
