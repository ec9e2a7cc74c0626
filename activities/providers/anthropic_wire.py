"""A towline conversation as a Messages API request (`POST /v1/messages`): pure mapping.

- System parts become the top-level `system`; messages alternate `user` /
  `assistant` (consecutive ones of a role are merged, tool results first, as
  the API requires); tool results carry `is_error` for every status but
  `succeeded`.
- A response's parts go back in their order; its server tool blocks (native tool parts of
  an Anthropic model: `server_tool_use`, `*_tool_result`, `mcp_tool_*`) exactly as they
  came, and a text block with its citations (`anthropic_native`). Its `ThinkingPart`s made by an
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from towline.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    Message,
    ModelResponse,
    RetryPart,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
    as_media,
)
from towline.options import Thinking
from towline.runtime.model_types import ModelInfo
from towline.runtime.output_schema import strict_schema

from ._common import own_thinking, retry_text, unsupported_media
from ._media import data_url_bytes, media_type, split_return
from .anthropic_native import citations_back

__all__ = [
    "build_request",
    "anthropic_messages",
    "media_block",
    "thinking_budget",
    "native_schema",
    "DEFAULT_MAX_TOKENS",
    "THINKING_BUDGETS",
    "MIN_THINKING_BUDGET",
    "IMAGE_TYPES",
    "FAMILY",
]

FAMILY = "anthropic"
"""The thinking family of Claude models (their signatures are read by no other API)."""

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
