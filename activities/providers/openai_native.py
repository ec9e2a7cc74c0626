"""The Responses API's built-in tools and background mode: native tools to its request, its
output items back, and a background response started, polled and cancelled.

- Request: `WebSearch` is `web_search` (a user location, a context size, allowed domains
  as `filters`), `CodeExecution` `code_interpreter` (an existing container, or a new one
  with files), `FileSearch` `file_search`, `HostedMCP` an `mcp` tool that calls without
  asking for approval; `include` asks for the search sources, the code's outputs and the
  file search results, so the history holds them. `WebFetch`, blocked domains and a use
  limit have no Responses form: the request fails before it is sent.
- Answer: a `web_search_call`, `code_interpreter_call`, `file_search_call`, `mcp_call` or
  `mcp_list_tools` item is a `NativeToolCallPart` (the item as it came in `provider_data`)
  and a `NativeToolReturnPart` (its readable result; the item holds both); an output
  text's `annotations` stay on its `TextPart` as citations. Uses are counted by item.
- Back: each such item goes back as it came, in order, after the reasoning item that led
  to it (`openai_responses`); another provider's never does.
- Background (`ModelSettings.background`): the request is sent with `background: true`
  and `store: true` (a background response is kept for polling only that way once its
  ~10 minutes are over; a run may wait a day); a `queued` or `in_progress` answer is a
  `Suspended` response the run polls (`GET /responses/{id}`), and cancels
  (`POST /responses/{id}/cancel`) when it is cancelled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from towline.messages import (
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    ResponsePart,
    Suspended,
    Usage,
)
from towline.native_tools import (
    CodeExecution,
    FileSearch,
    HostedMCP,
    NativeTool,
    WebFetch,
    WebSearch,
)
from towline.runtime.model_types import ModelHTTPError

from ._common import field_map, items
from .native import mcp_token, refuse_options, unsupported, uses_of

__all__ = ["FAMILY", "native_tools", "native_includes", "native_item", "item_parts",
           "native_uses", "background_state", "RUNNING", "failed_background", "suspended_response"]

FAMILY = "openai"

RUNNING = ("queued", "in_progress")
"""The statuses of a background response that is not finished."""

_INCLUDES = {"web_search": "web_search_call.action.sources",
             "code_execution": "code_interpreter_call.outputs",
             "file_search": "file_search_call.results"}


def native_tools(model: str, tools: Sequence[NativeTool]) -> list[dict[str, Any]]:
    """The request's built-in tools; raises `UnsupportedNativeTool` for what Responses lacks."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, WebSearch):
            refuse_options(model, tool, ("user_location", "search_context_size", "allowed_domains"))
            entry: dict[str, Any] = {"type": "web_search"}
            if tool.user_location is not None:
                entry["user_location"] = {"type": "approximate",
                                          **tool.user_location.model_dump(exclude_none=True)}
            if tool.search_context_size is not None:
                entry["search_context_size"] = tool.search_context_size
            if tool.allowed_domains is not None:
                entry["filters"] = {"allowed_domains": list(tool.allowed_domains)}
            out.append(entry)
        elif isinstance(tool, CodeExecution):
            if tool.container and tool.file_ids:
                raise unsupported(model, tool, "file_ids", "an existing container keeps its own files")
            container: Any = tool.container or {"type": "auto", **(
                {"file_ids": list(tool.file_ids)} if tool.file_ids else {})}
            out.append({"type": "code_interpreter", "container": container})
        elif isinstance(tool, FileSearch):
            entry = {"type": "file_search", "vector_store_ids": list(tool.vector_store_ids)}
            if tool.max_num_results is not None:
                entry["max_num_results"] = tool.max_num_results
            out.append(entry)
        elif isinstance(tool, HostedMCP):
            entry = {"type": "mcp", "server_label": tool.label, "server_url": tool.url,
                     "require_approval": "never"}
            if tool.allowed_tools is not None:
                entry["allowed_tools"] = list(tool.allowed_tools)
            if tool.description:
                entry["server_description"] = tool.description
            token = mcp_token(tool)
            if token is not None:
                entry["headers"] = {"Authorization": f"Bearer {token}"}
            out.append(entry)
        else:
            assert isinstance(tool, WebFetch)
            raise unsupported(model, tool)
    return out


def native_includes(tools: Sequence[NativeTool]) -> list[str]:
    """The `include` values that bring the tools' results into the answer."""
    return [_INCLUDES[t.kind] for t in tools if t.kind in _INCLUDES]


# --- the answer ----------------------------------------------------------------------------


def _args_of(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def item_parts(item: Mapping[str, Any]) -> list[ResponsePart]:
    """A built-in tool's output item as its call and return parts ([] for another item)."""
    kind = str(item.get("type") or "")
    item_id = str(item.get("id") or "")
    failed = item.get("status") in ("failed", "incomplete") or bool(item.get("error"))
    status = "failed" if failed else "succeeded"
    args: dict[str, Any]
    content: Any
    if kind == "web_search_call":
        action = dict(field_map(item.get("action")))
        name = "web_search"
        args = {k: v for k, v in action.items() if k not in ("sources", "type") and v is not None}
        content = {"action": action.get("type"), "sources": action.get("sources")}
    elif kind == "code_interpreter_call":
        name, args = "code_execution", {"code": item.get("code")}
        content = {"outputs": item.get("outputs"), "container": item.get("container_id")}
    elif kind == "file_search_call":
        name, args = "file_search", {"queries": item.get("queries")}
        content = [{k: r.get(k) for k in ("filename", "score", "text") if k in r}
                   for r in items(item.get("results"))]
    elif kind == "mcp_call":
        name = "mcp"
        args = {"server": item.get("server_label"), "tool": item.get("name"),
                "arguments": _args_of(item.get("arguments"))}
        content = item.get("error") or item.get("output")
    elif kind == "mcp_list_tools":
        name = "mcp"
        args = {"server": item.get("server_label"), "tool": "list_tools"}
        content = [t.get("name") for t in items(item.get("tools"))]
        failed = bool(item.get("error"))
        status = "failed" if failed else "succeeded"
    else:
        return []
    return [NativeToolCallPart(tool_name=name, args=args, tool_call_id=item_id, provider=FAMILY,
                               provider_data=dict(item)),
            NativeToolReturnPart(tool_name=name, tool_call_id=item_id, content=content,
                                 status=status, provider=FAMILY)]


def native_uses(output: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The native tool uses of an answer's items: web searches (the `search` actions, which
    are billed), code interpreter calls, file searches and MCP calls."""
    names: list[str] = []
    for item in output:
        kind = item.get("type")
        action = field_map(item.get("action")).get("type")
        if kind == "web_search_call" and action in (None, "search"):
            names.append("web_search")
        elif kind == "code_interpreter_call":
            names.append("code_execution")
        elif kind == "file_search_call":
            names.append("file_search")
        elif kind == "mcp_call":
            names.append("mcp")
    return uses_of(names)


def native_item(part: ResponsePart) -> dict[str, Any] | None:
    """The input item a native call part goes back as (its item, unchanged), else None."""
    if isinstance(part, NativeToolCallPart) and part.provider == FAMILY and part.provider_data.get("type"):
        return dict(part.provider_data)
    return None


# --- background ----------------------------------------------------------------------------


def background_state(data: Mapping[str, Any]) -> Suspended | None:
    """A background response not finished yet, as `Suspended` (None: it is finished)."""
    status = str(data.get("status") or "")
    if status not in RUNNING:
        return None
    return Suspended(reason="background", provider=FAMILY,
                     response_id=str(data.get("id") or "") or None, status=status)


def failed_background(data: Mapping[str, Any]) -> ModelHTTPError | None:
    """The final error of a background response that failed or was cancelled (None: it did
    not). A poll cannot change it, so it is not retried."""
    status = data.get("status")
    if status == "failed":
        error = field_map(data.get("error"))
        message = str(error.get("message") or "the background response failed")
        code = error.get("code")
        return ModelHTTPError(400, f"openai: the background response failed: {message}"
                                   + (f" ({code})" if code else ""))
    if status == "cancelled":
        return ModelHTTPError(400, "openai: the background response was cancelled")
    return None


def suspended_response(data: Mapping[str, Any], model: str, state: Suspended) -> ModelResponse:
    """A background response still running: no parts yet, one request."""
    return ModelResponse(usage=Usage(requests=1), model_name=str(data.get("model") or model),
                         suspended=state)
