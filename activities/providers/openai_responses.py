"""`openai-responses:<model>`: OpenAI's Responses API (`POST /responses`), its built-in tools
and background mode.

Stateless: every request carries the whole conversation as input items and
`store` is off, since the run's history is the record (a provider-side copy
would only be a second one). Like the Chat Completions module, two pure
functions around one SDK call; streaming reuses both.

Reasoning round trips. A reasoning model's `reasoning` output items become
`ThinkingPart`s (`id` the item id, `signature` its `encrypted_content`, `content`
its summary) and the function calls that follow one keep their item id
(`ToolCallPart.metadata["openai_item_id"]`). Every request that thinks (the settings
ask for it, or the history holds OpenAI reasoning) asks for
`include=["reasoning.encrypted_content"]` and sends each reasoning item back right
before the function calls it led to, those with their ids, as the API requires of a
stateless client: it refuses a function call whose reasoning item is missing and a
reasoning item whose encrypted content was changed. A reasoning item that led to an
answer (not a call) is not sent again: the API drops earlier turns' reasoning anyway,
and the message it was paired with has no id to be sent with. Thinking from another
provider family, or OpenAI thinking without encrypted content, is never sent.

Built-in (native) tools:

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
  to it; another provider's never does.

Background (`ModelSettings.background`): the request is sent with `background: true`
and `store: true` (a background response is kept for polling only that way once its
~10 minutes are over; a run may wait a day); a `queued` or `in_progress` answer is a
`Suspended` response the run polls (`GET /responses/{id}`), and cancels
(`POST /responses/{id}/cancel`) when it is cancelled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from towline.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    ResponsePart,
    Suspended,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
)
from towline.native_tools import (
    CodeExecution,
    FileSearch,
    HostedMCP,
    NativeTool,
    WebFetch,
    WebSearch,
)
from towline.runtime.model_types import ModelHTTPError, ModelInfo

from ._common import (
    Endpoint,
    ProviderModel,
    field_map,
    items,
    openai_error,
    own_thinking,
    parse_args,
    raw_json,
    request_timeout,
    retry_text,
)
from ._media import split_return
from ._stream import stream_responses
from .native import mcp_token, refuse_options, unsupported, uses_of
from .openai_chat import call_arguments, call_json, make_openai_client
from .openai_media import responses_part
from .openai_options import (
    RETRIED_ERRORS,
    json_schema_format,
    openai_usage,
    reasoning_effort,
    run_cache_key,
    thinks,
)

__all__ = [
    "OpenAIResponsesModel", "build_request", "parse_response", "input_items", "ITEM_ID",
    "ENCRYPTED_REASONING", "INCOMPLETE_REASONS", "POLICY_ERRORS", "PENDING", "STATUSES",
    "FAMILY", "native_tools", "native_includes", "native_item", "item_parts", "native_uses",
    "background_state", "failed_background", "suspended_response"
]

FAMILY = "openai"

# --- built-in tools: the request -----------------------------------------------------------


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


# --- built-in tools: the answer ------------------------------------------------------------


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
    if status not in PENDING:
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


# --- the model -----------------------------------------------------------------------------


ITEM_ID = "openai_item_id"
"""The `ToolCallPart.metadata` key of a function call's Responses item id (`fc_…`), kept for
the calls a reasoning item led to: the API pairs them by it."""
ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""The `include` value that asks for reasoning items' encrypted content."""


@dataclass(frozen=True)
class OpenAIResponsesModel(ProviderModel):
    """A model behind OpenAI's Responses API (`openai-responses:<model>`).

    Same credentials and endpoint as `OpenAIChatModel` (`OPENAI_API_KEY`,
    `OPENAI_BASE_URL`); instructions are sent as `developer` messages.
    """

    prefix: ClassVar[str] = "openai-responses"
    sdk: ClassVar[str] = "openai"
    extra: ClassVar[str] = "openai"
    key_env: ClassVar[str] = "OPENAI_API_KEY"
    url_env: ClassVar[str] = "OPENAI_BASE_URL"
    own_provider: ClassVar[str] = "openai"
    native_family: ClassVar[str] = "openai"

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Responses API request (SDK retries off: Temporal retries); with
        `ModelSettings.background`, the start of a background response (`Suspended`)."""
        key = run_cache_key(info) if info.settings.prompt_cache else None
        body, extra = build_request(self.model, messages, info, cache_key=key, model_name=self.name)
        endpoint = self.endpoint()  # after the request is built: what it refuses, it refuses first
        client = self.sdk_client(endpoint, make_openai_client)
        if info.settings.background:  # kept by OpenAI until the run has polled it
            body.update(background=True, store=True)
            data = await self._raw(endpoint, client.responses.with_raw_response.create, **body,
                                   extra_body=extra or None, timeout=request_timeout())
            state = background_state(data)
            if state is not None:
                return suspended_response(data, self.model, state)
        elif info.native_tools and not info.settings.stream:  # the items exactly as they came
            data = await self._raw(endpoint, client.responses.with_raw_response.create, **body,
                                   extra_body=extra or None, timeout=request_timeout())
        else:
            send = stream_responses if info.settings.stream else call_json  # streaming
            data = await send(client.responses.create, body, extra, endpoint)
        return self.price(parse_response(data, info, self.model), endpoint)

    async def poll(self, response_id: str, info: ModelInfo) -> ModelResponse:
        """`GET /responses/{id}`: the finished background response, or still `Suspended`."""
        endpoint = self.endpoint()
        client = self.sdk_client(endpoint, make_openai_client)
        data = await self._raw(endpoint, client.responses.with_raw_response.retrieve, response_id,
                               timeout=request_timeout())
        state = background_state(data)
        if state is not None:
            return suspended_response(data, self.model, state)
        failure = failed_background(data)
        if failure is not None:
            raise failure
        return self.price(parse_response(data, info, self.model), endpoint)

    async def cancel(self, response_id: str) -> None:
        """`POST /responses/{id}/cancel`: stop a background response."""
        endpoint = self.endpoint()
        client = self.sdk_client(endpoint, make_openai_client)
        await self._raw(endpoint, client.responses.with_raw_response.cancel, response_id,
                        timeout=request_timeout())

    @staticmethod
    async def _raw(endpoint: Endpoint, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        import openai

        try:
            return await raw_json(call, *args, **kwargs)
        except openai.OpenAIError as e:
            raise openai_error(e, endpoint) from None


# --- towline -> Responses ----------------------------------------------------------------


def _sendable(part: ThinkingPart) -> bool:
    """A reasoning item the API can take back: OpenAI's, with its id and encrypted content."""
    return own_thinking(part, "openai") and bool(part.id) and bool(part.signature)


def _user_content(content: str | list[Any]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [{"type": "input_text", "text": item} if isinstance(item, str)
            else responses_part(item, "a prompt") for item in content]


def _tool_output(p: ToolReturnPart) -> str | list[dict[str, Any]]:
    """A tool return's `output`: its text, or text and media parts when it returned media."""
    text, media = split_return(p)
    if not media:
        return text
    out = [{"type": "input_text", "text": text}] if text else []
    return out + [responses_part(m, "a tool return") for m in media]


def _response_items(m: ModelResponse) -> list[dict[str, Any]]:
    """A model response as input items, in its parts' order: a reasoning item goes back
    when the item it led to does (a function call with an item id, or a built-in tool's
    call), that call with its id; built-in tools' items as they came."""
    out: list[dict[str, Any]] = []
    text: list[str] = []
    parts = m.parts
    for i, p in enumerate(parts):
        if not isinstance(p, TextPart) and text:
            out.append({"role": "assistant", "content": "".join(text)})
            text = []
        if isinstance(p, TextPart):
            text.append(p.content)
        elif isinstance(p, ThinkingPart):
            following = next((q for q in parts[i + 1:]
                              if not (isinstance(q, ThinkingPart) and _sendable(q))), None)
            paired = (isinstance(following, ToolCallPart) and bool(following.metadata.get(ITEM_ID))
                      ) or (following is not None and native_item(following) is not None)
            if _sendable(p) and paired:
                summary = [{"type": "summary_text", "text": p.content}] if p.content else []
                out.append({"type": "reasoning", "id": p.id, "encrypted_content": p.signature,
                            "summary": summary})
        elif isinstance(p, ToolCallPart):
            item: dict[str, Any] = {"type": "function_call", "call_id": p.tool_call_id,
                                    "name": p.tool_name, "arguments": call_arguments(p)}
            if p.metadata.get(ITEM_ID):
                item["id"] = str(p.metadata[ITEM_ID])
            out.append(item)
        else:
            native = native_item(p)  # a built-in tool's item (its return part holds no item)
            if native is not None:
                out.append(native)
    if text:
        out.append({"role": "assistant", "content": "".join(text)})
    return out


def input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Towline messages as Responses API input items."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if not isinstance(m, ModelRequest):
            out += _response_items(m)
            continue
        for p in m.parts:
            if isinstance(p, SystemPart):
                out.append({"role": "developer", "content": p.content})
            elif isinstance(p, UserPart):
                out.append({"role": "user", "content": _user_content(p.content)})
            elif isinstance(p, ToolReturnPart):
                out.append({"type": "function_call_output", "call_id": p.tool_call_id,
                            "output": _tool_output(p)})
            elif p.tool_call_id:
                out.append({"type": "function_call_output", "call_id": p.tool_call_id,
                            "output": retry_text(p)})
            else:
                out.append({"role": "user", "content": retry_text(p)})
    return out


def build_request(model: str, messages: Sequence[Message], info: ModelInfo, *,
                  cache_key: str | None = None, model_name: str | None = None,
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's SDK arguments, and `ModelSettings.extra` (sent as extra body fields).

    `cache_key` is the `prompt_cache_key` (None: not sent). Raises `unsupported_media` for a
    media part the API cannot take, `UnsupportedNativeTool` for a native tool it lacks
    (`model_name` names the model in that error)."""
    body: dict[str, Any] = {"model": model, "input": input_items(messages), "store": False}
    tools = [*info.tools, *info.output_tools]
    builtins = native_tools(model_name or f"openai-responses:{model}", info.native_tools)
    if tools or builtins:
        body["tools"] = [*builtins, *(
            {"type": "function", "name": t.name, "description": t.description,
             "parameters": t.parameters_json_schema or {"type": "object", "properties": {}},
             "strict": False}
            for t in tools
        )]
    settings = info.settings
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.top_p is not None:
        body["top_p"] = settings.top_p
    if settings.max_tokens is not None:
        body["max_output_tokens"] = settings.max_tokens
    effort = reasoning_effort(settings.thinking)
    if effort is not None:
        body["reasoning"] = {"effort": effort, "summary": "auto"} if effort != "none" else {
            "effort": effort}
    carried = any(isinstance(m, ModelResponse) and any(_sendable(t) for t in m.thinking)
                  for m in messages)
    include = native_includes(info.native_tools)
    if thinks(settings.thinking) or carried:
        include.insert(0, ENCRYPTED_REASONING)
    if include:
        body["include"] = include
    native = json_schema_format(info)
    if native is not None:
        body["text"] = {"format": {"type": "json_schema", **native}}
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    return body, dict(settings.extra)


# --- Responses -> towline ----------------------------------------------------------------


def _thinking(item: Mapping[str, Any]) -> ThinkingPart:
    """A `reasoning` output item: its summary texts (joined by blank lines), id and
    encrypted content."""
    texts = [str(s.get("text") or "") for s in items(item.get("summary"))]
    encrypted = item.get("encrypted_content")
    return ThinkingPart(content="\n\n".join(t for t in texts if t), provider="openai",
                        id=str(item.get("id") or "") or None,
                        signature=str(encrypted) if encrypted else None)


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A Responses API answer (JSON data) as a `ModelResponse` (usage not yet priced)."""
    parts: list[ResponsePart] = []
    refusal: str | None = None
    outputs = {t.name for t in info.output_tools}
    reasoned = False  # a sendable reasoning item came before: keep the calls' item ids
    for item in items(data.get("output")):
        kind = item.get("type")
        if kind == "reasoning":
            thinking = _thinking(item)
            reasoned = _sendable(thinking)
            parts.append(thinking)
            continue
        if kind == "message":
            reasoned = False
            for content in items(item.get("content")):
                if content.get("type") == "output_text" and content.get("text"):
                    cited = [dict(a) for a in items(content.get("annotations"))]
                    parts.append(TextPart(content=str(content["text"]), citations=cited))
                elif content.get("type") == "refusal":
                    refusal = str(content.get("refusal") or "")
                    parts.append(TextPart(content=refusal))
        elif kind == "function_call" and item.get("name"):
            args, raw = parse_args(item.get("arguments"))
            name = str(item["name"])
            metadata = {ITEM_ID: str(item["id"])} if reasoned and item.get("id") else {}
            parts.append(ToolCallPart(tool_name=name, args=args, raw_args=raw,
                                      tool_call_id=str(item.get("call_id") or ""),
                                      kind="output" if name in outputs else "function",
                                      metadata=metadata))
        else:
            parts += item_parts(item)  # a built-in tool's call (and its result)
    finish, details = _finish(data, refusal, any(isinstance(p, ToolCallPart) for p in parts))
    usage = openai_usage(data.get("usage"), "input", "output").model_copy(
        update={"native_tool_uses": native_uses(items(data.get("output")))})
    return ModelResponse(parts=parts, usage=usage, model_name=str(data.get("model") or model),
                         finish_reason=finish, provider_details=details)


INCOMPLETE_REASONS: dict[str, FinishReason] = {
    "max_output_tokens": "length", "max_messages": "length",
    "steered": "length",  # a WebSocket `response.steer` cut it at a boundary: nothing runs
    "content_filter": "content_filter",
}
"""Every `incomplete_details.reason` of an `incomplete` response, normalised (an unknown one is
`length`: the answer is cut short)."""

POLICY_ERRORS = frozenset({"invalid_prompt", "bio_policy", "misalignment_policy_violation",
                           "image_content_policy_violation"})
"""The `error.code`s of a `failed` response that refuse the content (usage policies): read as a
`content_filter` answer (`ContentFiltered`), with the usage it was billed."""

PENDING = frozenset({"queued", "in_progress"})
"""Statuses of a response not finished yet: only a background response (`background=True`) is
answered so; polling it to its end belongs to background mode, and without it such an answer
fails the request."""

STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled", *PENDING})
"""Every `status` of a Responses API `response` that `parse_response` reads."""


def _finish(data: Mapping[str, Any], refusal: str | None, calls: bool) -> tuple[
        FinishReason, dict[str, str]]:
    """The normalised finish reason and the provider's own words; raises `ModelHTTPError` for
    a response that failed (retryable or not by its error code), was cancelled, or is pending."""
    status = str(data.get("status") or "completed")
    details = {"status": status}
    reason = str(field_map(data.get("incomplete_details")).get("reason") or "")
    if reason:
        details["incomplete_reason"] = reason
    error = field_map(data.get("error"))
    code = str(error.get("code") or "")
    if code:
        details["error_code"] = code
    if status == "failed" and code not in POLICY_ERRORS:
        message = str(error.get("message") or "the response failed")
        raise ModelHTTPError(RETRIED_ERRORS.get(code, 400),
                             f"openai: {message}" + (f" ({code})" if code else ""))
    if status == "cancelled" or status in PENDING:
        raise ModelHTTPError(400, f"openai: the response is {status} (background responses are "
                                  f"not polled)")
    if refusal is not None or status == "failed":
        return "content_filter", {**details, **({"refusal": refusal} if refusal else {})}
    if status == "incomplete":
        return INCOMPLETE_REASONS.get(reason, "length"), details
    return ("tool_calls" if calls else "stop"), details
