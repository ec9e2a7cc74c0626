"""`anthropic:<model>`: Anthropic's Messages API (`POST /v1/messages`): a towline conversation
as a request, sent through the SDK (streamed or not), and the answer read back.

The request (`build_request`, a pure mapping):

- System parts become the top-level `system`; messages alternate `user` /
  `assistant` (consecutive ones of a role are merged, tool results first, as
  the API requires); tool results carry `is_error` for every status but
  `succeeded`.
- A response's parts go back in their order; its server tool blocks (native tool parts of
  an Anthropic model: `server_tool_use`, `*_tool_result`, `mcp_tool_*`) exactly as they
  came, and a text block with its citations. Its `ThinkingPart`s made by an
  Anthropic model return as `thinking` (text and signature) or
  `redacted_thinking` (data) blocks, unchanged: the API checks the signature
  and, with thinking on, wants the assistant turn of a tool loop to start with
  one. Thinking of another family, or without a signature, cannot be read by
  the API: it is left out of this request (the history keeps it).
- Media: images by URL or base64 (`image/jpeg`, `png`, `gif`, `webp`), PDFs by
  URL or base64 and text as `document` blocks, in a prompt and inside a
  `tool_result`. Any other media type fails the request before it is sent.
- `ModelSettings.thinking` is a budget of thinking tokens (`THINKING_BUDGETS`);
  `max_tokens` is raised above it when needed, and the sampling settings the
  API refuses with thinking are left out. With thinking on, the API wants the
  assistant turn of the current tool loop to start with its thinking: when it
  cannot (the turn came from another family's model, after a fallback), that
  one request goes without `thinking` and the model thinks again from its
  next turn, rather than the run failing.
- `ModelSettings.prompt_cache` (on by default) puts three `cache_control`
  breakpoints (the API takes four at most): the last tool, the system prompt,
  and the last block of the newest message, so each step reads the previous
  step's prefix from the cache.
- Native structured output is `output_config.format` with the output's strict
  JSON schema.
- `max_tokens` is required by the API: `AnthropicModel.default_max_tokens` fills it when the
  settings leave it unset.

Server tools (native tools):

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
  their blocks). A request with native tools reads the raw JSON, so their encrypted
  content is kept byte for byte.
- Back: the blocks go back exactly as they came, in order, with their encrypted content
  and citations; blocks of another provider never do.

The answer (`parse_response`): text, tool calls, and `thinking` / `redacted_thinking` blocks
as `ThinkingPart`s (with their signature) in the order they came, and server tools' blocks
as native tool parts. `pause_turn` is a `Suspended` response: the run continues the turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from towline.messages import (
    BinaryContent,
    DocumentUrl,
    FinishReason,
    ImageUrl,
    Message,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    ResponsePart,
    RetryPart,
    Suspended,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
    as_media,
)
from towline.native_tools import (
    CodeExecution,
    FileSearch,
    HostedMCP,
    NativeTool,
    WebFetch,
    WebSearch,
)
from towline.options import Thinking
from towline.runtime.model_types import ModelInfo
from towline.runtime.output_schema import strict_schema

from ._common import (
    Endpoint,
    ProviderModel,
    anthropic_error,
    field_map,
    items,
    own_thinking,
    raw_json,
    request_timeout,
    retry_text,
    unsupported_media,
)
from ._media import data_url_bytes, media_type, split_return
from ._stream import stream_anthropic
from .native import mcp_token, native_parts, refuse_options, unsupported, uses_of

__all__ = [
    "AnthropicModel", "build_request", "parse_response", "anthropic_error",
    "DEFAULT_MAX_TOKENS", "STOP_REASONS", "PAUSED", "anthropic_messages", "media_block",
    "thinking_budget", "native_schema", "THINKING_BUDGETS", "MIN_THINKING_BUDGET",
    "IMAGE_TYPES", "FAMILY", "BETAS", "CITATION_TYPES", "NativeRequest", "native_request",
    "server_part", "server_usage", "paused", "citations_back"
]

FAMILY = "anthropic"
"""The thinking family of Claude models (their signatures are read by no other API)."""

# --- server tools: the request -------------------------------------------------------------


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


# --- server tools: the answer --------------------------------------------------------------


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


# --- towline -> Messages API ---------------------------------------------------------------


DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` sent when `ModelSettings.max_tokens` is unset (the API requires one)."""

MIN_THINKING_BUDGET = 1024
"""The smallest `budget_tokens` the API takes: smaller int budgets are raised to it."""

THINKING_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
"""The thinking budget of each effort; `thinking=True` is `medium`."""

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The image media types the Messages API takes."""

_EPHEMERAL = {"type": "ephemeral"}


def thinking_budget(thinking: Thinking | None) -> int | None:
    """The `budget_tokens` for `ModelSettings.thinking` (None: send no `thinking` field)."""
    if thinking is None or thinking is False:
        return None
    if thinking is True:
        return THINKING_BUDGETS["medium"]
    if isinstance(thinking, str):
        return THINKING_BUDGETS[thinking]
    return max(thinking, MIN_THINKING_BUDGET)


def native_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The output schema as structured outputs take it: strict (closed objects, all
    properties required), with the keywords the API does not support (numeric and length
    bounds, unknown string formats) moved into descriptions by the SDK's own transform."""
    strict = strict_schema(schema)
    try:
        from anthropic import transform_schema
    except ImportError:  # pragma: no cover - the request needs the SDK anyway
        return strict
    try:
        return transform_schema(strict)
    except ValueError:  # a part without a type (e.g. `Any`): the strict form as it is
        return strict


# --- media ---------------------------------------------------------------------------------


def media_block(part: ImageUrl | DocumentUrl | BinaryContent, where: str) -> dict[str, Any]:
    """The `image` or `document` block of a media part; raises `unsupported_media` for a
    media type the API does not take (before anything is sent)."""
    if isinstance(part, ImageUrl | DocumentUrl):
        inline = data_url_bytes(part.url)
        if inline is not None:  # the API fetches http(s) URLs only: send the bytes
            kind, data = inline
            return media_block(BinaryContent(data=data, media_type=part.media_type or kind), where)
        kind = media_type(part) or ""
        if isinstance(part, ImageUrl):
            if kind and kind.replace("image/jpg", "image/jpeg") not in IMAGE_TYPES:
                raise unsupported_media(FAMILY, kind, where)
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        if kind and kind != "application/pdf":  # a URL source is a PDF
            raise unsupported_media(FAMILY, kind, f"{where} (a document URL must be a PDF)")
        return {"type": "document", "source": {"type": "url", "url": part.url}}
    kind = (media_type(part) or "").replace("image/jpg", "image/jpeg")
    if kind in IMAGE_TYPES:
        return {"type": "image", "source": {"type": "base64", "media_type": kind, "data": part.base64}}
    if kind == "application/pdf":
        return {"type": "document",
                "source": {"type": "base64", "media_type": kind, "data": part.base64}}
    if kind.startswith("text/"):
        try:
            text = part.data.decode("utf-8")
        except UnicodeDecodeError:
            raise unsupported_media(FAMILY, f"{kind} (not UTF-8)", where) from None
        return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    raise unsupported_media(FAMILY, part.media_type, where)


def _prompt_blocks(content: str | Sequence[Any]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for item in content:
        media = as_media(item)
        if media is not None:
            blocks.append(media_block(media, "a prompt"))
        elif isinstance(item, str) and item:
            blocks.append({"type": "text", "text": item})
    return blocks


def _tool_result(part: ToolReturnPart) -> dict[str, Any]:
    """A tool return as a `tool_result`: its text, and its images and documents as blocks."""
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.tool_call_id}
    text, media = split_return(part)
    if not media:
        result["content"] = text
    else:
        text = text.strip()
        result["content"] = ([{"type": "text", "text": text}] if text else []) + [
            media_block(m, "a tool return") for m in media]
    if part.status != "succeeded":
        result["is_error"] = True
    return result


# --- messages ------------------------------------------------------------------------------


def _response_blocks(m: ModelResponse) -> list[dict[str, Any]]:
    """An assistant turn's blocks, in the response's order (see the module's docstring)."""
    blocks: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, ThinkingPart):
            if not own_thinking(p, FAMILY) or not p.signature:
                continue
            blocks.append({"type": "redacted_thinking", "data": p.signature} if p.redacted else
                          {"type": "thinking", "thinking": p.content, "signature": p.signature})
        elif isinstance(p, TextPart):
            if p.content:
                cited = citations_back(p)
                blocks.append({"type": "text", "text": p.content, **({"citations": cited} if cited else {})})
        elif isinstance(p, ToolCallPart):
            blocks.append({"type": "tool_use", "id": p.tool_call_id, "name": p.tool_name,
                           "input": p.args})
        elif p.provider == FAMILY and p.provider_data:  # a server tool's block, as it came
            blocks.append(dict(p.provider_data))
    return blocks


def _blocks(m: Message) -> tuple[str, list[dict[str, Any]], list[str]]:
    """A message's role, content blocks, and system texts."""
    if isinstance(m, ModelResponse):
        return "assistant", _response_blocks(m), []
    blocks: list[dict[str, Any]] = []
    system: list[str] = []
    for p in m.parts:
        if isinstance(p, SystemPart):
            system.append(p.content)
        elif isinstance(p, UserPart):
            blocks += _prompt_blocks(p.content)
        elif isinstance(p, ToolReturnPart):
            blocks.append(_tool_result(p))
        elif isinstance(p, RetryPart) and p.tool_call_id:  # pyright: ignore[reportUnnecessaryIsInstance]
            blocks.append({"type": "tool_result", "tool_use_id": p.tool_call_id,
                           "content": retry_text(p), "is_error": True})
        else:
            blocks.append({"type": "text", "text": retry_text(p)})
    return "user", blocks, system


def anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating messages of a conversation."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role, blocks, texts = _blocks(m)
        system += texts
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    for message in out:  # tool results open their user turn
        if message["role"] == "user":
            content: list[dict[str, Any]] = message["content"]
            message["content"] = ([b for b in content if b["type"] == "tool_result"]
                                  + [b for b in content if b["type"] != "tool_result"])
    return "\n\n".join(system), out


def _mark_newest(conversation: list[dict[str, Any]]) -> None:
    """A cache breakpoint on the newest message's last block that can carry one."""
    if not conversation:
        return
    for block in reversed(conversation[-1]["content"]):
        if block["type"] in ("thinking", "redacted_thinking"):
            continue  # thinking blocks take no cache_control
        block["cache_control"] = dict(_EPHEMERAL)
        return


def _thinks_first(conversation: list[dict[str, Any]]) -> bool:
    """Whether the assistant turn the last user turn's tool results answer (if any) starts
    with a thinking block, as the API requires of it when thinking is on."""
    if len(conversation) < 2 or not any(b["type"] == "tool_result" for b in conversation[-1]["content"]):
        return True
    turn = conversation[-2]["content"]
    return bool(turn) and turn[0]["type"] in ("thinking", "redacted_thinking")


def build_request(
    model: str, messages: Sequence[Message], info: ModelInfo, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's SDK arguments, and the extra body fields (sampling settings and
    `ModelSettings.extra`). Raises `unsupported_media` for media the API cannot take."""
    system, conversation = anthropic_messages(messages)
    settings = info.settings
    cache = settings.prompt_cache
    max_tokens = settings.max_tokens or default_max_tokens
    budget = thinking_budget(settings.thinking)
    if budget is not None and not _thinks_first(conversation):
        budget = None  # see the module's docstring
    if budget is not None and max_tokens <= budget:  # thinking counts towards max_tokens
        max_tokens = budget + default_max_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": conversation}
    if system:
        body["system"] = ([{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]
                          if cache else system)
    tools = [*info.tools, *info.output_tools]
    if tools:
        body["tools"] = [
            {"name": t.name, "description": t.description,
             "input_schema": t.parameters_json_schema or {"type": "object", "properties": {}}}
            for t in tools
        ]
        if cache:
            body["tools"][-1]["cache_control"] = dict(_EPHEMERAL)
    if cache:
        _mark_newest(conversation)
    if budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if info.output_mode == "native" and info.output_schema is not None:
        body["output_config"] = {"format": {"type": "json_schema",
                                            "schema": native_schema(info.output_schema)}}
    # Sampling fields travel as extra body fields: newer SDKs no longer take them as
    # arguments, while the API still reads them for the models that support them. With
    # thinking on the API refuses a temperature other than 1 and a top_p below 0.95.
    extra: dict[str, Any] = {}
    t, top_p = settings.temperature, settings.top_p
    if t is not None and (budget is None or t == 1):
        extra["temperature"] = t
    if top_p is not None and (budget is None or top_p >= 0.95):
        extra["top_p"] = top_p
    return body, {**extra, **settings.extra}


# --- the model -----------------------------------------------------------------------------


STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
    "max_tokens": "length", "model_context_window_exceeded": "length",
    "refusal": "content_filter",  # the API's classifiers stopped the answer: `ContentFiltered`
    "pause_turn": "stop",  # see PAUSED
}
"""Every `stop_reason` of the Messages API (the SDK's `StopReason`), normalised. An unknown
one is read by the answer's content; `provider_details["stop_reason"]` keeps it as it came."""

PAUSED = frozenset({"pause_turn"})
"""Stop reasons of a turn the API paused (a long server-tool turn), not ended: the answer
goes back as the assistant turn of the next request of the same step to go on: such an
answer is `Suspended` (`paused`) and the run continues it (`workflows/model_call.py`)."""


@dataclass(frozen=True)
class AnthropicModel(ProviderModel):
    """A Claude model behind Anthropic's Messages API (`anthropic:<model>`).

    Uses `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` from the worker's
    environment unless `api_key=` / `base_url=` / `client=` say otherwise.
    """

    default_max_tokens: int = DEFAULT_MAX_TOKENS
    """`max_tokens` when `ModelSettings.max_tokens` is unset."""

    prefix: ClassVar[str] = "anthropic"
    sdk: ClassVar[str] = "anthropic"
    extra: ClassVar[str] = "anthropic"
    key_env: ClassVar[str] = "ANTHROPIC_API_KEY"
    url_env: ClassVar[str] = "ANTHROPIC_BASE_URL"
    own_provider: ClassVar[str] = "anthropic"
    native_family: ClassVar[str] = "anthropic"

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Messages API request (SDK retries off: Temporal retries)."""
        body, extra = build_request(self.model, messages, info, self.default_max_tokens)
        native = native_request(self.name, info.native_tools, messages)  # may refuse: first
        native.apply(body, extra)
        endpoint, client = self.connect()
        import anthropic

        if info.settings.stream:  # streaming
            data = await stream_anthropic(client, body, extra, endpoint, self.prefix,
                                          headers=native.headers, beta=bool(native.mcp_servers))
        else:
            try:
                if info.native_tools:  # the blocks exactly as they came: the raw JSON
                    data = await raw_json(
                        client.messages.with_raw_response.create, **body,
                        extra_body=extra or None, extra_headers=native.headers or None,
                        timeout=request_timeout())
                else:
                    result = await client.messages.create(**body, extra_body=extra or None,
                                                          timeout=request_timeout())
                    data = result.model_dump(mode="json")
            except anthropic.AnthropicError as e:
                raise anthropic_error(e, endpoint, self.prefix) from None
        return self.price(parse_response(data, info, self.model), endpoint)

    def connect(self) -> tuple[Endpoint, Any]:
        """The endpoint and the SDK client (one per worker, endpoint and event loop)."""
        endpoint = self.endpoint()
        return endpoint, self.sdk_client(endpoint, _make_client)


def _make_client(module: Any, endpoint: Endpoint) -> Any:
    return module.AsyncAnthropic(api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=0)


# --- Messages API -> towline ----------------------------------------------------------------


def _part(block: Mapping[str, Any], outputs: set[str], container: str | None) -> ResponsePart | None:
    """One content block as a part (None for a block towline does not keep)."""
    kind = block.get("type")
    if kind == "text" and block.get("text"):
        return text_part(block)
    if kind == "thinking":
        return ThinkingPart(content=str(block.get("thinking") or ""),
                            signature=str(block.get("signature") or "") or None, provider=FAMILY)
    if kind == "redacted_thinking" and block.get("data"):
        return ThinkingPart(signature=str(block["data"]), redacted=True, provider=FAMILY)
    if kind == "tool_use" and block.get("name"):
        raw_input = block.get("input")
        name = str(block["name"])
        return ToolCallPart(
            tool_name=name, args=dict(field_map(raw_input)),
            raw_args=None if isinstance(raw_input, Mapping) else repr(raw_input),
            tool_call_id=str(block.get("id") or ""),
            kind="output" if name in outputs else "function",
        )
    return server_part(block, container)


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A Messages API answer (JSON data) as a `ModelResponse` (usage not yet priced)."""
    outputs = {t.name for t in info.output_tools}
    container = str(field_map(data.get("container")).get("id") or "") or None
    parts = [p for p in (_part(b, outputs, container) for b in items(data.get("content")))
             if p is not None]
    reason = str(data.get("stop_reason") or "")
    finish = STOP_REASONS.get(reason) or (
        "tool_calls" if any(isinstance(p, ToolCallPart) for p in parts) else "stop")
    raw = field_map(data.get("usage"))
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    # The API counts thinking in output_tokens without reporting it apart: reasoning_tokens
    # stays 0 rather than an estimate.
    usage = Usage(
        requests=1, input_tokens=int(raw.get("input_tokens") or 0) + read + written,
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=read, cache_write_tokens=written,
        native_tool_uses=server_usage(data, parts),
    )
    return ModelResponse(parts=parts, usage=usage, model_name=str(data.get("model") or model),
                         finish_reason=finish, suspended=paused(data) if reason in PAUSED else None,
                         provider_details={"stop_reason": reason} if reason else {})
