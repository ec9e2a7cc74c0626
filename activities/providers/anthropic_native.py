"""Anthropic's server tools: native tools to the Messages API and what it answers, back.

- Request: `WebSearch` is `web_search_20250305`, `WebFetch` `web_fetch_20250910`,
  `CodeExecution` `code_execution_20250825` (in `tools`), and `HostedMCP` an entry of
  `mcp_servers` (the MCP connector); the betas they need go in the `anthropic-beta`
  header. A code execution container is reused: the one `CodeExecution.container` names,
  else the last one this conversation ran in (so files it wrote are still there, and a
  paused turn goes on in its own container). `FileSearch`, a search's context size and a
  container's starting files have no Anthropic form: the request fails before it is sent.
- Answer: a `server_tool_use` (or `mcp_tool_use`) block is a `NativeToolCallPart`, its
  `*_tool_result` (or `mcp_tool_result`) block a `NativeToolReturnPart`, each with the block
  as it came in `provider_data`; a text block's `citations` stay on its `TextPart`; usage's
  `server_tool_use` counts become `Usage.native_tool_uses` (code runs and MCP calls by
  their blocks); `pause_turn` is a `Suspended` response (the run continues the turn).
- Back: the blocks go back exactly as they came, in order, with their encrypted content
  and citations; blocks of another provider never do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from towline.messages import (
    Message,
    NativeToolCallPart,
    NativeToolReturnPart,
    ResponsePart,
    Suspended,
    TextPart,
)
from towline.native_tools import (
    CodeExecution,
    FileSearch,
    HostedMCP,
    NativeTool,
    WebFetch,
    WebSearch,
)

from ._common import field_map, items
from .native import mcp_token, native_parts, refuse_options, unsupported, uses_of

__all__ = ["FAMILY", "BETAS", "CITATION_TYPES", "NativeRequest", "native_request", "server_part",
           "server_usage", "paused", "citations_back"]

FAMILY = "anthropic"

BETAS = {"web_fetch": "web-fetch-2025-09-10", "code_execution": "code-execution-2025-08-25",
         "mcp": "mcp-client-2025-04-04"}
"""The `anthropic-beta` header value each server tool needs."""

CITATION_TYPES = frozenset({"char_location", "page_location", "content_block_location",
                            "web_search_result_location", "search_result_location"})
"""The Messages API's citation types (only these go back in a text block's `citations`)."""

_NAMES = {"web_search": "web_search", "web_fetch": "web_fetch", "code_execution": "code_execution",
          "bash_code_execution": "code_execution", "text_editor_code_execution": "code_execution"}
_RESULTS = {"web_search_tool_result": "web_search", "web_fetch_tool_result": "web_fetch",
            "code_execution_tool_result": "code_execution",
            "bash_code_execution_tool_result": "code_execution",
            "text_editor_code_execution_tool_result": "code_execution"}


class NativeRequest:
    """What the native tools add to a Messages API request."""

    def __init__(self) -> None:
        self.tools: list[dict[str, Any]] = []
        self.mcp_servers: list[dict[str, Any]] = []
        self.container: str | None = None
        self.betas: list[str] = []

    def apply(self, body: dict[str, Any], extra: dict[str, Any]) -> None:
        """Put the tools in `body`, and `mcp_servers` and `container` (which the SDK's own
        arguments may not take) in the extra body fields."""
        if self.tools:  # first: the cache breakpoint stays on the last function tool
            body["tools"] = [*self.tools, *body.get("tools", [])]
        if self.mcp_servers:
            extra["mcp_servers"] = self.mcp_servers
        if self.container:
            extra["container"] = self.container

    @property
    def headers(self) -> dict[str, str]:
        """The `anthropic-beta` header, when a tool needs one."""
        return {"anthropic-beta": ",".join(self.betas)} if self.betas else {}


def _filters(tool: WebSearch | WebFetch, entry: dict[str, Any]) -> None:
    if tool.max_uses is not None:
        entry["max_uses"] = tool.max_uses
    if tool.allowed_domains is not None:
        entry["allowed_domains"] = list(tool.allowed_domains)
    if tool.blocked_domains is not None:
        entry["blocked_domains"] = list(tool.blocked_domains)


def native_request(model: str, tools: Sequence[NativeTool], messages: Sequence[Message]) -> NativeRequest:
    """The request's server tools; raises `UnsupportedNativeTool` for what Anthropic lacks."""
    out = NativeRequest()
    for tool in tools:
        if isinstance(tool, WebSearch):
            refuse_options(model, tool, ("max_uses", "allowed_domains", "blocked_domains",
                                         "user_location"))
            entry: dict[str, Any] = {"type": "web_search_20250305", "name": "web_search"}
            _filters(tool, entry)
            if tool.user_location is not None:
                entry["user_location"] = {"type": "approximate",
                                          **tool.user_location.model_dump(exclude_none=True)}
            out.tools.append(entry)
        elif isinstance(tool, WebFetch):
            entry = {"type": "web_fetch_20250910", "name": "web_fetch"}
            _filters(tool, entry)
            if tool.citations:
                entry["citations"] = {"enabled": True}
            if tool.max_content_tokens is not None:
                entry["max_content_tokens"] = tool.max_content_tokens
            out.tools.append(entry)
            out.betas.append(BETAS["web_fetch"])
        elif isinstance(tool, CodeExecution):
            refuse_options(model, tool, ("container",),
                           "Anthropic's containers take files as container_upload blocks")
            out.tools.append({"type": "code_execution_20250825", "name": "code_execution"})
            out.betas.append(BETAS["code_execution"])
            out.container = tool.container or last_container(messages)
        elif isinstance(tool, HostedMCP):
            server: dict[str, Any] = {"type": "url", "url": tool.url, "name": tool.label}
            token = mcp_token(tool)
            if token is not None:
                server["authorization_token"] = token
            if tool.allowed_tools is not None:
                server["tool_configuration"] = {"enabled": True,
                                                "allowed_tools": list(tool.allowed_tools)}
            out.mcp_servers.append(server)
            if BETAS["mcp"] not in out.betas:
                out.betas.append(BETAS["mcp"])
        else:
            assert isinstance(tool, FileSearch)
            raise unsupported(model, tool)
    return out


def last_container(messages: Sequence[Message]) -> str | None:
    """The container the conversation's last Anthropic code execution ran in, if any."""
    found: str | None = None
    for p in native_parts(messages, FAMILY):
        if isinstance(p, NativeToolReturnPart) and isinstance(p.content, dict):
            container = p.content.get("container")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(container, str) and container:
                found = container
    return found


# --- the answer ----------------------------------------------------------------------------


def _result_content(block: Mapping[str, Any], container: str | None) -> tuple[Any, bool]:
    """A result block's readable content (no encrypted parts), and whether it is an error."""
    raw: Any = block.get("content")
    if not isinstance(raw, Mapping):  # web search results: titles and URLs
        results = [{k: r.get(k) for k in ("title", "url", "page_age") if k in r} for r in items(raw)]
        return results, False
    inner = field_map(raw)
    kind = str(inner.get("type") or "")
    failed = kind.endswith("_error") or "error_code" in inner
    shown: dict[str, Any] = {k: v for k, v in inner.items() if k != "encrypted_content"
                             and not (k == "content" and isinstance(v, Mapping))}
    if block.get("type") == "web_fetch_tool_result" and not failed:
        document = field_map(inner.get("content"))
        shown = {"url": inner.get("url"), "title": document.get("title")}
    if container and kind.endswith("code_execution_result"):
        shown["container"] = container
    return shown, failed


def server_part(block: Mapping[str, Any], container: str | None = None) -> ResponsePart | None:
    """A server tool block as a native part (None for a block that is not one)."""
    kind = str(block.get("type") or "")
    data = dict(block)
    if kind == "server_tool_use":
        name = str(block.get("name") or "")
        return NativeToolCallPart(tool_name=_NAMES.get(name, name), args=dict(field_map(block.get("input"))),
                                  tool_call_id=str(block.get("id") or ""), provider=FAMILY,
                                  provider_data=data)
    if kind == "mcp_tool_use":
        args = {"server": block.get("server_name"), "tool": block.get("name"),
                "arguments": dict(field_map(block.get("input")))}
        return NativeToolCallPart(tool_name="mcp", args=args, tool_call_id=str(block.get("id") or ""),
                                  provider=FAMILY, provider_data=data)
    if kind == "mcp_tool_result":
        inner: Any = block.get("content")
        text = inner if isinstance(inner, str) else "".join(
            str(c.get("text") or "") for c in items(inner))
        return NativeToolReturnPart(tool_name="mcp", tool_call_id=str(block.get("tool_use_id") or ""),
                                    content=text, status="failed" if block.get("is_error") else "succeeded",
                                    provider=FAMILY, provider_data=data)
    if kind in _RESULTS:
        content, failed = _result_content(block, container)
        return NativeToolReturnPart(tool_name=_RESULTS[kind], tool_call_id=str(block.get("tool_use_id") or ""),
                                    content=content, status="failed" if failed else "succeeded",
                                    provider=FAMILY, provider_data=data)
    return None


def server_usage(data: Mapping[str, Any], parts: Sequence[ResponsePart]) -> dict[str, int]:
    """The answer's native tool uses: searches and fetches as its usage reports them, code
    runs and MCP calls by their blocks."""
    reported = field_map(field_map(data.get("usage")).get("server_tool_use"))
    calls = [p.tool_name for p in parts if isinstance(p, NativeToolCallPart)]
    return uses_of(calls, {"web_search": reported.get("web_search_requests"),
                           "web_fetch": reported.get("web_fetch_requests")})


def paused(data: Mapping[str, Any]) -> Suspended:
    """A paused answer (`anthropic.PAUSED`: `pause_turn`, a long turn paused) as `Suspended`:
    the run sends it back to go on."""
    return Suspended(reason="pause_turn", provider=FAMILY, response_id=str(data.get("id") or "") or None)


def text_part(block: Mapping[str, Any]) -> TextPart:
    """A text block, its citations kept as they came."""
    cited = [dict(c) for c in items(block.get("citations"))]
    return TextPart(content=str(block["text"]), citations=cited)


def citations_back(part: TextPart) -> list[dict[str, Any]]:
    """A text part's citations the Messages API takes back (its own kinds only)."""
    return [c for c in part.citations if c.get("type") in CITATION_TYPES]
