"""The Messages API's server tools on the fake provider: the blocks it issues and the rules it
keeps when they come back (`ServerTools`, a `FakeProvider.rules` entry beside `AnthropicRules`).

Issued as the real API issues them (shapes from recorded traffic: pydantic/pydantic-ai
`tests/models/cassettes/test_anthropic/test_anthropic_web_search_tool.yaml`,
`test_anthropic_web_fetch_tool.yaml`, `test_anthropic_code_execution_tool.yaml`,
`test_anthropic_mcp_servers.yaml` and `test_pause_turn_web_search_vcr.yaml`, at commit
4fda38988f2939fa6ea9cdefcf120693e10ef491): a `server_tool_use` block and its
`web_search_tool_result` (each result's `encrypted_content` sealed: an HMAC of its URL and
title with the fake's secret), a text block whose citations carry a sealed
`encrypted_index`, `web_fetch_tool_result`, `bash_code_execution_tool_result` with the
answer's `container`, `mcp_tool_use` / `mcp_tool_result`, and usage's `server_tool_use`
counts. `pause(...)` answers `pause_turn`, as the recording does after ten searches: the
turn so far, ending with a `server_tool_use` whose result the continuation brings.

Refused with HTTP 400 in the API's error shape:

- a `server_tool_use` (or `mcp_tool_use`) with no result block after it in its message
  ("web_search tool use with id … was found without a corresponding web_search_tool_result
  block", the wording pydantic-ai measured on claude-sonnet-4-5,
  `tests/models/anthropic/test_unpaired_native_tool_calls.py`), except where the API lets
  it be: the end of a paused turn sent back to be continued, and a call followed only by
  user turns of tool results (the call still in flight);
- a search result whose `encrypted_content` was changed ("messages.N.content.M: Invalid
  `encrypted_content` in `search_result` block", as public proxies quote the API's 400,
  e.g. router-for-me/CLIProxyAPI's executor tests), and a citation whose `encrypted_index` was;
- `mcp_servers` without the `mcp-client-2025-04-04` beta header;
- a continuation of a paused turn (the last message an assistant one, after a `pause_turn`)
  whose turn is not the one the fake issued, block for block (`cache_control` aside): the
  API documents that the paused response goes back "as is" to be continued.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any, cast
from urllib.parse import unquote

from anthropic_replies import message
from anthropic_rules import AnthropicRules, error_body
from fake_server import Recorded, Reply

__all__ = ["ServerTools"]

_RESULT_OF = {"web_search": "web_search_tool_result", "web_fetch": "web_fetch_tool_result",
              "code_execution": "code_execution_tool_result",
              "bash_code_execution": "bash_code_execution_tool_result",
              "text_editor_code_execution": "text_editor_code_execution_tool_result"}


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in cast(list[Any], value) if isinstance(v, dict)] if isinstance(value, list) else []


def _content(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = m.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else _list(content)


def _bare(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


class ServerTools:
    """What the fake Messages API's server tools issue, and what it refuses coming back."""

    def __init__(self, rules: AnthropicRules, secret: bytes = b"fake-anthropic-search-key") -> None:
        self.rules = rules
        self._secret = secret
        self.turn: list[dict[str, Any]] | None = None
        """The paused turn as issued so far (None: no turn is paused)."""
        self.container = "container_011CaNRhtVsGiXZx1CgSETLH"

    # --- what the server issues --------------------------------------------------------

    def seal(self, *fields: str) -> str:
        mac = hmac.new(self._secret, "\x1f".join(fields).encode(), hashlib.sha256).digest()
        return base64.b64encode(b"Eq" + mac).decode()

    def search(self, tool_id: str, query: str, pages: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """A web search: the `server_tool_use` block and its result, each page sealed."""
        results = [{"type": "web_search_result", "url": url, "title": title, "page_age": None,
                    "encrypted_content": self.seal(url, title)} for url, title in pages]
        return [{"type": "server_tool_use", "id": tool_id, "name": "web_search",
                 "input": {"query": query}},
                {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": results}]

    def cited(self, text: str, url: str, title: str, quote: str) -> dict[str, Any]:
        """A text block citing a search result (its location sealed)."""
        return {"type": "text", "text": text, "citations": [{
            "type": "web_search_result_location", "url": url, "title": title, "cited_text": quote,
            "encrypted_index": self.seal("index", url, quote)}]}

    @staticmethod
    def fetch(tool_id: str, url: str, title: str, text: str) -> list[dict[str, Any]]:
        """A web fetch and its document."""
        return [{"type": "server_tool_use", "id": tool_id, "name": "web_fetch", "input": {"url": url}},
                {"type": "web_fetch_tool_result", "tool_use_id": tool_id, "content": {
                    "type": "web_fetch_result", "url": url, "retrieved_at": "2026-05-04T10:00:00Z",
                    "content": {"type": "document", "title": title,
                                "source": {"type": "text", "media_type": "text/plain", "data": text}}}}]

    @staticmethod
    def bash(tool_id: str, command: str, stdout: str) -> list[dict[str, Any]]:
        """A command run in the container, and its result."""
        return [{"type": "server_tool_use", "id": tool_id, "name": "bash_code_execution",
                 "input": {"command": command}},
                {"type": "bash_code_execution_tool_result", "tool_use_id": tool_id, "content": {
                    "type": "bash_code_execution_result", "stdout": stdout, "stderr": "",
                    "return_code": 0, "content": []}}]

    @staticmethod
    def mcp(tool_id: str, server: str, tool: str, args: dict[str, Any], text: str) -> list[dict[str, Any]]:
        """A call of a hosted MCP server's tool, and its answer."""
        return [{"type": "mcp_tool_use", "id": tool_id, "name": tool, "server_name": server,
                 "input": args},
                {"type": "mcp_tool_result", "tool_use_id": tool_id, "is_error": False,
                 "content": [{"type": "text", "text": text}]}]

    def answer(self, content: list[dict[str, Any]], stop: str = "end_turn") -> Callable[[Recorded], Reply]:
        """A scripted reply: `content` issued (thinking signed), with `server_tool_use` usage and
        the container when code ran; `pause_turn` remembers the turn so far."""

        def reply(request: Recorded) -> Reply:
            body: Mapping[str, Any] = request.body if isinstance(request.body, dict) else {}
            issued = [self.rules.issue(b) for b in content]
            messages = _list(body.get("messages"))
            before = self.turn if messages and messages[-1].get("role") == "assistant" else None
            if stop == "pause_turn":
                self.turn = [*(before or []), *issued]
            else:
                self.turn = None
            uses = [b.get("name") for b in issued if b.get("type") == "server_tool_use"]
            fresh, read, written = self.rules.cache.usage(body)
            data = message(issued, stop, model=str(body.get("model") or unquote(request.path.split("/")[2])),
                           input_tokens=fresh, output_tokens=60, cache_read=read, cache_creation=written)
            data["usage"]["server_tool_use"] = {"web_search_requests": uses.count("web_search"),
                                                "web_fetch_requests": uses.count("web_fetch")}
            if any(str(n).endswith("code_execution") for n in uses):
                data["container"] = {"id": self.container, "expires_at": "2026-05-04T11:00:00Z"}
            return Reply(data)

        return reply

    # --- what the server refuses -------------------------------------------------------

    def __call__(self, request: Recorded) -> Reply | None:
        if request.method != "POST" or not isinstance(request.body, dict):
            return None
        body = cast(dict[str, Any], request.body)
        for check in (self._beta, self._continuation, self._paired, self._sealed):
            problem = check(body, request.headers)
            if problem is not None:
                return Reply(error_body(problem), status=400)
        return None

    @staticmethod
    def _beta(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        if body.get("mcp_servers") and "mcp-client-2025-04-04" not in headers.get("anthropic-beta", ""):
            return "mcp_servers: Extra inputs are not permitted"
        return None

    def _continuation(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        messages = _list(body.get("messages"))
        if self.turn is None or not messages or messages[-1].get("role") != "assistant":
            return None
        sent = [_bare(b) for b in _content(messages[-1])]
        if sent != [_bare(b) for b in self.turn]:
            return (f"messages.{len(messages) - 1}: a paused turn (stop_reason `pause_turn`) must be "
                    "sent back as it was returned to be continued")
        return None

    @staticmethod
    def _paired(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        messages = _list(body.get("messages"))
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            blocks = _content(m)
            for j, block in enumerate(blocks):
                kind = block.get("type")
                if kind not in ("server_tool_use", "mcp_tool_use"):
                    continue
                wanted = "mcp_tool_result" if kind == "mcp_tool_use" else _RESULT_OF.get(
                    str(block.get("name")), f"{block.get('name')}_tool_result")
                answered = any(b.get("type") == wanted and b.get("tool_use_id") == block.get("id")
                               for b in blocks[j + 1:])
                last = i == len(messages) - 1
                in_flight = all(n.get("role") == "user" and all(
                    b.get("type") == "tool_result" for b in _content(n)) for n in messages[i + 1:])
                if not answered and not last and not in_flight:
                    name = "mcp_tool_use" if kind == "mcp_tool_use" else f"{block.get('name')} tool use"
                    return (f"messages.{i}.content.{j}: {name} with id {block.get('id')} was found "
                            f"without a corresponding {wanted} block")
        return None

    def _sealed(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
        for i, m in enumerate(_list(body.get("messages"))):
            for j, block in enumerate(_content(m)):
                for result in _list(block.get("content")) if block.get("type") == "web_search_tool_result" else []:
                    expected = self.seal(str(result.get("url")), str(result.get("title")))
                    if not hmac.compare_digest(expected, str(result.get("encrypted_content"))):
                        return f"messages.{i}.content.{j}: Invalid `encrypted_content` in `search_result` block"
                for cite in _list(block.get("citations")):
                    if cite.get("type") != "web_search_result_location":
                        continue
                    expected = self.seal("index", str(cite.get("url")), str(cite.get("cited_text")))
                    if not hmac.compare_digest(expected, str(cite.get("encrypted_index"))):
                        return f"messages.{i}.content.{j}: Invalid `encrypted_index` in citation"
        return None

