"""`google:<model>`: Gemini through the official `google-genai` SDK (`towline[google]`), on
the Gemini Developer API or Vertex AI (`google-vertex:<model>`): the `generateContent` wire
format, the SDK call, and the answer (or its streamed chunks) read back.

Read on the worker when a request is made, never recorded:

- Gemini API: the key from `GOOGLE_API_KEY` or `GEMINI_API_KEY` (the SDK's own order:
  `GOOGLE_API_KEY` first), the endpoint from `GOOGLE_GEMINI_BASE_URL` (the variable the SDK
  itself honours) or the SDK's default.
- Vertex AI (`google-vertex:`, `GoogleModel(vertexai=True)`, or `google:` with
  `GOOGLE_GENAI_USE_VERTEXAI=true`): `GOOGLE_CLOUD_PROJECT` / `GOOGLE_CLOUD_LOCATION` with
  Application Default Credentials (or `credentials=`), or an API key (express mode: `api_key=`,
  or `GOOGLE_API_KEY` when no project is set); the endpoint from `GOOGLE_VERTEX_BASE_URL`.

The SDK's retries are off (one attempt per request, also for a pre-built `client=`), and
each request's timeout is the activity's: Temporal retries a 429 (after Gemini's `RetryInfo`
delay or a `Retry-After` header), a 5xx and a connection error; other 4xx are final; "The
input token count (...) exceeds the maximum number of tokens allowed" is
`ContextLengthExceeded`. Streaming reports thought text as `thinking` events and the answer
as `text` events, and gathers the chunks into the answer a plain request gets (`merge_chunks`).

The mapping (pure functions: `gemini_contents`, `gemini_config`, `parse_response`):

- Instructions and `SystemPart`s are the `system_instruction`; the conversation alternates
  `user` and `model` contents (consecutive messages of a role are merged, function
  responses first).
- Media: `BinaryContent` (and a `data:` URL) is `inline_data`, an `ImageUrl` / `DocumentUrl`
  is `file_data` (`file_uri`); a media type Gemini does not take is refused before anything
  is sent. Media a tool returned follow its `function_response` in the same user turn.
- Tool returns are `function_response` parts: `{"output": text}`, or `{"error": text}` for
  every status but `succeeded` (the text as `return_text` gives it); a `RetryPart` of a call
  is an error response, one without a call a user text.
- Thought signatures: Gemini signs the part that follows its thinking (a function call, a
  text). Each signature is kept as a `ThinkingPart(provider="google")` right before the part
  it came on (its `content` is the thought text when the thought part itself carried it, else
  empty), and goes back on that same part. Thinking of another family is never sent.
- Usage: `prompt_token_count` (cached tokens included) is the input; the output is the
  candidates' tokens plus `thoughts_token_count`, which is also `reasoning_tokens`.
  Gemini caches a repeated prompt prefix by itself (implicit caching: no request field, so
  `ModelSettings.prompt_cache` changes nothing here); `cached_content_token_count` is
  `cache_read_tokens`, priced at the cache rate.
- Native output: `response_mime_type: application/json` with the output's strict schema as
  `response_json_schema` (full JSON Schema; `response_schema`, a proto `Schema`, refuses
  `additionalProperties`). Tool definitions likewise go as `parameters_json_schema`.

Built-in (native) tools:

- Request: `WebSearch` is `google_search`, `WebFetch` `url_context`, `CodeExecution`
  `code_execution` (each a `Tool` of its own beside the function declarations). Gemini
  takes none of their options, nor `FileSearch` or `HostedMCP`: such a request fails
  before it is sent.
- Answer: an `executable_code` part is a `NativeToolCallPart` and its `code_execution_result`
  a `NativeToolReturnPart`, each with the part as it came (thought signature included, as
  base64 text) in `provider_data`. Grounding is not a part: the candidate's
  `grounding_metadata` (the searches and their sources) and `url_context_metadata` (the
  pages read) become a call and a return part before the answer, the metadata as it came
  in the return's `provider_data`, and each grounding support is a citation on the text
  part it supports.
- Back: the code parts go back as they came, signature on the part it came with; the
  grounding metadata stays in the history (a request has no field for it).
- Uses: a grounded answer is one search on Gemini 2.x (billed per grounded prompt), each
  of its queries one on Gemini 3 and later (billed per query); pages read, code runs.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from towline.activities.streaming import text_delta, thinking_delta
from towline.errors import ConfigurationError
from towline.messages import (
    BinaryContent,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    ResponsePart,
    RetryPart,
    SystemPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
    media_in,
    prompt_text,
)
from towline.native_tools import CodeExecution, NativeTool, WebFetch, WebSearch
from towline.options import Thinking
from towline.runtime.model_types import ModelConnectionError, ModelHTTPError, ModelInfo
from towline.runtime.output_schema import strict_schema

from ._common import (
    Endpoint,
    ProviderModel,
    cached_client,
    connection_error,
    field_map,
    import_sdk,
    items,
    own_thinking,
    remember_secrets,
    request_timeout,
    retry_text,
    return_text,
    status_error,
    unsupported_media,
)
from ._media import Media, data_url_bytes, media_type
from .native import refuse_options, unsupported, uses_of

__all__ = [
    "GoogleModel", "GoogleVertexModel", "GoogleEndpoint", "gemini_error", "google_error",
    "merge_chunks", "GEMINI_MEDIA_TYPES", "EFFORT_BUDGETS", "FINISH_REASONS",
    "BLOCKED_PROMPT", "gemini_contents", "gemini_config", "thinking_config", "parse_response",
    "signature_text", "signature_bytes", "media_part", "FAMILY", "native_tool_entries",
    "code_part", "grounding_parts", "cite", "native_part_back", "gemini_uses"
]

FAMILY = "google"
_MAJOR = re.compile(r"gemini-(\d+)")


# --- built-in tools ------------------------------------------------------------------------


_ENTRIES = {"web_search": "google_search", "web_fetch": "url_context",
            "code_execution": "code_execution"}


def native_tool_entries(model: str, tools: Sequence[NativeTool]) -> list[dict[str, Any]]:
    """The request's built-in tools; raises `UnsupportedNativeTool` for what Gemini lacks."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, WebSearch | WebFetch | CodeExecution):
            raise unsupported(model, tool)
        refuse_options(model, tool, (), "Gemini's built-in tools take no options")
        out.append({_ENTRIES[tool.kind]: {}})
    return out


def _listed(value: Any) -> list[Any]:
    """A JSON array's items (anything else: none)."""
    return list(value) if isinstance(value, list | tuple) else []  # pyright: ignore[reportUnknownArgumentType]


def _json_safe(value: Any) -> Any:
    """The SDK's dump with bytes (a thought signature) as standard base64 text."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in field_map(value).items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return getattr(value, "value", value)  # an enum of the SDK: its text


def code_part(part: Mapping[str, Any], index: int) -> ResponsePart | None:
    """An `executable_code` or `code_execution_result` part as a native part (None: neither)."""
    code = field_map(part.get("executable_code"))
    result = field_map(part.get("code_execution_result"))
    data = _json_safe(dict(part))
    if code:
        language = _json_safe(code.get("language"))
        return NativeToolCallPart(tool_name="code_execution", tool_call_id=str(code.get("id") or f"exec_{index}"),
                                  args={"code": code.get("code"), "language": language},
                                  provider=FAMILY, provider_data=data)
    if result:
        outcome = str(_json_safe(result.get("outcome")) or "")
        return NativeToolReturnPart(tool_name="code_execution",
                                    tool_call_id=str(result.get("id") or f"exec_{index}"),
                                    content={"outcome": outcome, "output": result.get("output")},
                                    status="succeeded" if outcome in ("OUTCOME_OK", "") else "failed",
                                    provider=FAMILY, provider_data=data)
    return None


def grounding_parts(candidate: Mapping[str, Any]) -> list[ResponsePart]:
    """The candidate's grounding (searches, pages read) as call and return parts."""
    out: list[ResponsePart] = []
    grounding = field_map(candidate.get("grounding_metadata"))
    if grounding:
        raw: Any = grounding.get("web_search_queries")
        queries = [str(q) for q in _listed(raw)]
        sources = [{"title": field_map(c.get("web")).get("title"), "url": field_map(c.get("web")).get("uri")}
                   for c in items(grounding.get("grounding_chunks"))]
        out += [NativeToolCallPart(tool_name="web_search", args={"queries": queries},
                                   tool_call_id="grounding", provider=FAMILY),
                NativeToolReturnPart(tool_name="web_search", tool_call_id="grounding", content=sources,
                                     provider=FAMILY,
                                     provider_data={"grounding_metadata": _json_safe(dict(grounding))})]
    pages = field_map(candidate.get("url_context_metadata"))
    if pages:
        read = [{"url": u.get("retrieved_url"), "status": _json_safe(u.get("url_retrieval_status"))}
                for u in items(pages.get("url_metadata"))]
        failed = bool(read) and all(r["status"] != "URL_RETRIEVAL_STATUS_SUCCESS" for r in read)
        out += [NativeToolCallPart(tool_name="web_fetch", args={"urls": [r["url"] for r in read]},
                                   tool_call_id="url_context", provider=FAMILY),
                NativeToolReturnPart(tool_name="web_fetch", tool_call_id="url_context", content=read,
                                     status="failed" if failed else "succeeded", provider=FAMILY,
                                     provider_data={"url_context_metadata": _json_safe(dict(pages))})]
    return out


def cite(parts: list[ResponsePart], candidate: Mapping[str, Any],
         text_at: Mapping[int, int]) -> list[ResponsePart]:
    """`parts` with each grounding support as a citation on the text part it supports: the
    one made of the content part its segment names (`text_at`: content part index -> index
    in `parts`), else the one where the segment ends in the answer's text."""
    grounding = field_map(candidate.get("grounding_metadata"))
    supports = items(grounding.get("grounding_supports"))
    if not supports:
        return parts
    chunks = items(grounding.get("grounding_chunks"))
    spans: list[tuple[int, int]] = []  # each text part's byte span in the answer
    at = 0
    for p in parts:
        size = len(p.content.encode()) if isinstance(p, TextPart) else 0
        spans.append((at, at + size))
        at += size
    cited: dict[int, list[dict[str, Any]]] = {}
    for support in supports:
        segment = field_map(support.get("segment"))
        end = int(segment.get("end_index") or 0)
        named = segment.get("part_index")
        target = text_at.get(named) if isinstance(named, int) else next(
            (i for i, (lo, hi) in enumerate(spans) if isinstance(parts[i], TextPart)
             and lo < end <= hi), None)
        if target is None:
            continue
        indices: Any = support.get("grounding_chunk_indices")
        sources = [field_map(chunks[i].get("web")) for i in _listed(indices)
                   if isinstance(i, int) and 0 <= i < len(chunks)]
        cited.setdefault(target, []).append({
            "type": "grounding_support", "text": segment.get("text"),
            "start_index": segment.get("start_index"), "end_index": end,
            "sources": [{"title": s.get("title"), "url": s.get("uri")} for s in sources]})
    return [p.model_copy(update={"citations": [*p.citations, *cited[i]]})
            if isinstance(p, TextPart) and i in cited else p for i, p in enumerate(parts)]


def native_part_back(part: NativeToolCallPart | NativeToolReturnPart) -> dict[str, Any] | None:
    """The content part a native part goes back as (a code part, as it came), else None."""
    data = part.provider_data
    if part.provider != FAMILY or not ("executable_code" in data or "code_execution_result" in data):
        return None
    out = dict(data)
    signature = out.get("thought_signature")
    if isinstance(signature, str):
        out["thought_signature"] = base64.b64decode(signature)
    return out


def gemini_uses(model: str, parts: Sequence[ResponsePart]) -> dict[str, int]:
    """The answer's native tool uses (see the module's docstring)."""
    names: list[str] = []
    for p in parts:
        if isinstance(p, NativeToolCallPart):
            if p.tool_name == "web_search":
                queries = _listed(p.args.get("queries"))
                found = _MAJOR.search(model)
                per_query = bool(found) and int(found.group(1)) >= 3
                names += ["web_search"] * (max(len(queries), 1) if per_query else 1)
            elif p.tool_name == "web_fetch":
                names += ["web_fetch"] * max(len(_listed(p.args.get("urls"))), 1)
            else:
                names.append(p.tool_name)
    return uses_of(names)


# --- the wire format -----------------------------------------------------------------------


GEMINI_MEDIA_TYPES = frozenset({
    "image/png", "image/jpeg", "image/webp", "image/heic", "image/heif",
    "application/pdf", "text/plain", "text/html", "text/css", "text/csv", "text/xml",
    "text/markdown", "text/rtf", "text/javascript", "application/x-javascript",
    "text/x-python", "application/x-python",
    "audio/wav", "audio/x-wav", "audio/mp3", "audio/mpeg", "audio/aiff", "audio/aac",
    "audio/ogg", "audio/flac",
    "video/mp4", "video/mpeg", "video/mov", "video/quicktime", "video/avi", "video/x-flv",
    "video/mpg", "video/webm", "video/wmv", "video/3gpp",
})
"""The media types Gemini reads (its image, document, audio and video understanding guides)."""

EFFORT_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}
"""The thinking budget each effort stands for on Gemini 2.x (the table Google gives for its
OpenAI-compatible `reasoning_effort`); Gemini 3 and later take the effort as `thinking_level`."""

FINISH_REASONS: dict[str, FinishReason | None] = {
    "FINISH_REASON_UNSPECIFIED": None, "STOP": None, "MAX_TOKENS": "length",
    "CONTINUATION": "length",  # cut at the per-request cap (towline sends no continuation token)
    "SAFETY": "content_filter", "RECITATION": "content_filter", "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter", "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter", "MODEL_ARMOR": "content_filter",
    "ESCALATION": "content_filter", "PUP_LIMITED_DISABLED": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error", "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error", "MALFORMED_RESPONSE": "error",
    "MISSING_THOUGHT_SIGNATURE": "error", "NO_IMAGE": "error", "IMAGE_OTHER": "error",
    "OTHER": "error",
}
"""Every `FinishReason` of google-genai, normalised (None: `stop`, or `tool_calls` when the
answer has calls). Filters and policies (Vertex AI's Model Armor included) are
`content_filter`, which ends the run with `ContentFiltered`; an answer Gemini itself calls
malformed or unexpected is `error`, which the model is told about and asked again (with the
`finishMessage`, which google-genai keeps for Vertex AI only). A reason this table does not
know yet is read by the answer's content (and kept in `provider_details`)."""

BLOCKED_PROMPT: FinishReason = "content_filter"
"""A prompt Gemini blocked (`promptFeedback.blockReason`, no candidate), whatever its
`BlockedReason`: `SAFETY`, `MODEL_ARMOR`, `JAILBREAK`, ..."""


# --- signatures ----------------------------------------------------------------------------


def signature_text(value: Any) -> str | None:
    """A thought signature as towline keeps it: standard base64 text (the SDK gives bytes)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii") if value else None
    return str(value) if value else None


def signature_bytes(text: str) -> bytes:
    """A kept signature as the bytes the SDK sends (either base64 alphabet is read)."""
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return text.encode()  # a hand-made signature: Gemini refuses it, as it would any forgery


# --- towline -> Gemini ---------------------------------------------------------------------


def media_part(part: Media, where: str) -> dict[str, Any]:
    """A media part as Gemini's `inline_data` (bytes, a `data:` URL) or `file_data` (a URL)."""
    kind = media_type(part)
    if kind is None or kind not in GEMINI_MEDIA_TYPES:
        raise unsupported_media("google", kind, where)
    if isinstance(part, BinaryContent):
        return {"inline_data": {"data": part.data, "mime_type": kind}}
    inline = data_url_bytes(part.url)
    if inline is not None:
        return {"inline_data": {"data": inline[1], "mime_type": kind}}
    return {"file_data": {"file_uri": part.url, "mime_type": kind}}


def _user_parts(p: UserPart) -> list[dict[str, Any]]:
    if isinstance(p.content, str):
        return [{"text": p.content}] if p.content else []
    out: list[dict[str, Any]] = []
    for item in p.content:
        if isinstance(item, str):
            if item:
                out.append({"text": item})
        else:
            out.append(media_part(item, "a prompt"))
    return out


def _tool_return(p: ToolReturnPart) -> list[dict[str, Any]]:
    """A `function_response` part, then the media the tool returned (Gemini 2.x reads media
    in a function response only as parts of the turn)."""
    rest, media = media_in(p.content)
    content: Any = rest[0] if len(rest) == 1 else rest if rest else None
    if media and not rest:
        content = prompt_text(media)
    text = return_text(p.model_copy(update={"content": content}))
    key = "output" if p.status == "succeeded" else "error"
    out: list[dict[str, Any]] = [{"function_response": {
        "name": p.tool_name, "id": p.tool_call_id, "response": {key: text}}}]
    return out + [media_part(m, f"the return of tool {p.tool_name!r}") for m in media]


def _request_parts(m: ModelRequest) -> tuple[list[dict[str, Any]], list[str]]:
    """A request's Gemini parts (function responses first) and its system texts."""
    responses: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    system: list[str] = []
    for p in m.parts:
        if isinstance(p, SystemPart):
            system.append(p.content)
        elif isinstance(p, UserPart):
            others += _user_parts(p)
        elif isinstance(p, ToolReturnPart):
            parts = _tool_return(p)
            responses.append(parts[0])
            others += parts[1:]
        elif isinstance(p, RetryPart) and p.tool_call_id and p.tool_name:  # pyright: ignore[reportUnnecessaryIsInstance]
            responses.append({"function_response": {
                "name": p.tool_name, "id": p.tool_call_id, "response": {"error": retry_text(p)}}})
        else:
            others.append({"text": retry_text(p)})
    return responses + others, system


def _model_parts(m: ModelResponse) -> list[dict[str, Any]]:
    """A response's parts, each signature on the part it came with."""
    out: list[dict[str, Any]] = []
    pending: str | None = None
    for p in m.parts:
        if isinstance(p, ThinkingPart):
            if not own_thinking(p, FAMILY):
                continue
            if p.content:
                part: dict[str, Any] = {"text": p.content, "thought": True}
                if p.signature:
                    part["thought_signature"] = signature_bytes(p.signature)
                out.append(part)
            else:
                pending = p.signature
            continue
        if isinstance(p, TextPart):
            if not p.content:
                continue
            part = {"text": p.content}
        elif isinstance(p, ToolCallPart):
            part = {"function_call": {"name": p.tool_name, "args": p.args}}
            if p.tool_call_id:
                part["function_call"]["id"] = p.tool_call_id
        else:
            back = native_part_back(p)  # a code part, as it came (grounding is not sent)
            if back is not None:
                out.append(back)
            continue
        if pending:
            part["thought_signature"] = signature_bytes(pending)
        pending = None
        out.append(part)
    return out  # a signature with no part after it (an empty final text) has nothing to ride on


def gemini_contents(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system instruction and the `contents` of a conversation."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ModelResponse):
            role, parts = "model", _model_parts(m)
        else:
            parts, texts = _request_parts(m)
            role = "user"
            system += texts
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            merged: list[dict[str, Any]] = contents[-1]["parts"] + parts
            if role == "user":  # function responses open their turn
                merged = ([p for p in merged if "function_response" in p]
                          + [p for p in merged if "function_response" not in p])
            contents[-1]["parts"] = merged
        else:
            contents.append({"role": role, "parts": parts})
    return "\n\n".join(system), contents


def _major(model: str) -> int:
    found = _MAJOR.search(model)
    return int(found.group(1)) if found else 0


def thinking_config(thinking: Thinking | None, model: str) -> dict[str, Any] | None:
    """`thinking_config` for `ModelSettings.thinking` (None: the model's default).

    On: the thoughts are included. An effort is `thinking_level` on Gemini 3 and later, a
    budget (`EFFORT_BUDGETS`) before; an int is `thinking_budget`; off is a budget of 0 (a
    model that cannot stop thinking refuses it)."""
    if thinking is None:
        return None
    if thinking is False:
        return {"thinking_budget": 0}
    config: dict[str, Any] = {"include_thoughts": True}
    if isinstance(thinking, str):
        if _major(model) >= 3:
            config["thinking_level"] = thinking.upper()
        else:
            config["thinking_budget"] = EFFORT_BUDGETS[thinking]
    elif thinking is not True:
        config["thinking_budget"] = int(thinking)
    return config


def gemini_config(model: str, messages: Sequence[Message], info: ModelInfo) -> tuple[
        list[dict[str, Any]], dict[str, Any]]:
    """The request's `contents` and its `config` (`GenerateContentConfig` fields, snake case;
    `ModelSettings.extra` is not in it: the caller splits it between config and body)."""
    system, contents = gemini_contents(messages)
    settings = info.settings
    config: dict[str, Any] = {}
    if system:
        config["system_instruction"] = system
    if settings.temperature is not None:
        config["temperature"] = settings.temperature
    if settings.top_p is not None:
        config["top_p"] = settings.top_p
    if settings.max_tokens is not None:
        config["max_output_tokens"] = settings.max_tokens
    tools = [*info.tools, *info.output_tools]
    builtins = native_tool_entries(f"google:{model}", info.native_tools)
    if tools:
        config["tools"] = [{"function_declarations": [
            {"name": t.name, "description": t.description,
             "parameters_json_schema": t.parameters_json_schema or {"type": "object", "properties": {}}}
            for t in tools
        ]}]
    if builtins:
        config["tools"] = [*config.get("tools", []), *builtins]
    thinking = thinking_config(settings.thinking, model)
    if thinking is not None:
        config["thinking_config"] = thinking
    if info.output_mode == "native" and info.output_schema is not None:
        config["response_mime_type"] = "application/json"
        config["response_json_schema"] = strict_schema(info.output_schema)
    return contents, config


# --- Gemini -> towline ---------------------------------------------------------------------


def _usage(raw: Mapping[str, Any]) -> Usage:
    thoughts = int(raw.get("thoughts_token_count") or 0)
    return Usage(
        requests=1,
        input_tokens=int(raw.get("prompt_token_count") or 0)
        + int(raw.get("tool_use_prompt_token_count") or 0),
        output_tokens=int(raw.get("candidates_token_count") or 0) + thoughts,
        reasoning_tokens=thoughts,
        cache_read_tokens=int(raw.get("cached_content_token_count") or 0),
    )


def _finish(reason: str, calls: bool) -> FinishReason:
    return FINISH_REASONS.get(reason) or ("tool_calls" if calls else "stop")


def _enum_text(value: Any) -> str:
    """An enum field's value as text (the SDK gives its enum, a dump gives the text)."""
    return str(getattr(value, "value", value) or "")


def parse_response(data: Mapping[str, Any], info: ModelInfo, model: str) -> ModelResponse:
    """A `GenerateContentResponse` (the SDK's snake-case dump) as a `ModelResponse` (usage
    not yet priced). A prompt Gemini blocked (no candidate) is an empty `content_filter`;
    `provider_details` keeps Gemini's finish (or block) reason and message."""
    out: list[ResponsePart] = []
    outputs = {t.name for t in info.output_tools}
    candidates = items(data.get("candidates"))
    candidate: Mapping[str, Any] = candidates[0] if candidates else {}
    out += grounding_parts(candidate)  # what it searched and read before it answered
    text_at: dict[int, int] = {}
    for index, part in enumerate(items(field_map(candidate.get("content")).get("parts"))):
        signature = signature_text(part.get("thought_signature"))
        call = field_map(part.get("function_call"))
        native = code_part(part, index)
        if native is not None:
            out.append(native)
            continue
        if part.get("thought"):
            if part.get("text") or signature:
                out.append(ThinkingPart(content=str(part.get("text") or ""), signature=signature,
                                        provider=FAMILY))
            continue
        if call.get("name"):
            if signature:
                out.append(ThinkingPart(signature=signature, provider=FAMILY))
            name = str(call["name"])
            args = call.get("args")
            out.append(ToolCallPart(
                tool_name=name, args=dict(field_map(args)),
                raw_args=None if args is None or isinstance(args, Mapping) else repr(args),
                tool_call_id=str(call.get("id") or ""),
                kind="output" if name in outputs else "function",
            ))
        elif part.get("text") or signature:
            if signature:
                out.append(ThinkingPart(signature=signature, provider=FAMILY))
            if part.get("text"):
                text_at[index] = len(out)
                out.append(TextPart(content=str(part["text"])))
    out = cite(out, candidate, text_at)
    reason = _enum_text(candidate.get("finish_reason"))
    finish = _finish(reason, any(isinstance(p, ToolCallPart) for p in out))
    source, keys = candidate, ("finish_reason", "finish_message")
    if not reason and field_map(data.get("prompt_feedback")).get("block_reason"):  # no candidate
        finish, source = BLOCKED_PROMPT, field_map(data.get("prompt_feedback"))
        keys = ("block_reason", "block_reason_message")
    details = {k: _enum_text(source.get(k)) for k in keys if source.get(k)}
    usage = _usage(field_map(data.get("usage_metadata"))).model_copy(
        update={"native_tool_uses": gemini_uses(model, out)})
    return ModelResponse(parts=out, usage=usage,
                         model_name=str(data.get("model_version") or model), finish_reason=finish,
                         provider_details=details)


# --- the model -----------------------------------------------------------------------------


_OVERFLOW = re.compile(r"input token count.*exceeds the maximum number of tokens", re.IGNORECASE | re.DOTALL)
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class GoogleEndpoint(Endpoint):
    """Where and as whom a Gemini request goes (resolved on the worker, never recorded)."""

    vertexai: bool = False
    project: str | None = None
    location: str | None = None


@dataclass(frozen=True)
class GoogleModel(ProviderModel):
    """A Gemini model (`google:<model>`, e.g. `google:gemini-2.5-flash`).

    `api_key=` / `base_url=` override the environment; `vertexai=True` (with `project=`,
    `location=`, `credentials=` or an express-mode `api_key=`) sends it to Vertex AI;
    `client=` hands it a pre-built `google.genai.Client`.
    """

    vertexai: bool | None = None
    """Vertex AI instead of the Gemini API (None: `GOOGLE_GENAI_USE_VERTEXAI`)."""
    project: str | None = None
    """The Google Cloud project (Vertex AI; default `GOOGLE_CLOUD_PROJECT`)."""
    location: str | None = None
    """The Google Cloud location (Vertex AI; default `GOOGLE_CLOUD_LOCATION`, else the SDK's)."""
    credentials: Any = field(default=None, repr=False, compare=False)
    """`google.auth` credentials for Vertex AI (default: Application Default Credentials)."""

    prefix: ClassVar[str] = "google"
    sdk: ClassVar[str] = "google.genai"
    extra: ClassVar[str] = "google"
    key_env: ClassVar[str] = "GEMINI_API_KEY"
    url_env: ClassVar[str] = "GOOGLE_GEMINI_BASE_URL"
    own_provider: ClassVar[str] = "google"
    native_family: ClassVar[str] = "google"

    @property
    def on_vertex(self) -> bool:
        """Whether requests go to Vertex AI (`vertexai=`, else `GOOGLE_GENAI_USE_VERTEXAI`)."""
        if self.vertexai is not None:
            return self.vertexai
        return os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip().lower() in _TRUE

    @property
    def system(self) -> str:
        """The OpenTelemetry `gen_ai.system` of its requests."""
        return "gcp.vertex_ai" if self.on_vertex else "gcp.gemini"

    def endpoint(self) -> GoogleEndpoint:
        """The API (Gemini or Vertex AI), endpoint and credentials, from the configuration or
        the worker's environment."""
        vertex = self.on_vertex
        url_env = "GOOGLE_VERTEX_BASE_URL" if vertex else self.url_env
        base_url = self.base_url or os.environ.get(url_env) or None
        env_key = os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or None
        if vertex:
            project = self.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
            location = self.location or os.environ.get("GOOGLE_CLOUD_LOCATION") or None
            # an explicit key is express mode; a project or credentials mean ADC; else the env key
            key = self.api_key or (None if project or self.credentials is not None else env_key)
            return GoogleEndpoint(base_url, key, vertexai=True, project=None if key else project,
                                  location=None if key else location)
        key = self.api_key or env_key
        if not key and self.client is None:
            raise ConfigurationError(
                f"model {self.name!r} needs an API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) "
                f"on the worker (or pass api_key=)")
        return GoogleEndpoint(base_url, key)

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One `generateContent` request, or a streamed one (SDK retries off)."""
        endpoint = self.endpoint()
        contents, config = gemini_config(self.model, messages, info)
        try:
            client = self._client(endpoint)
            from google.genai import types

            config = _with_extra(config, info.settings.extra, set(types.GenerateContentConfig.model_fields))
            if info.settings.stream:
                data = await _streamed(client, self.model, contents, config)
            else:
                result = await client.aio.models.generate_content(
                    model=self.model, contents=contents, config=config)
                data = result.model_dump(exclude_none=True)
        except ConfigurationError:  # a ValueError too, but towline's own (the SDK is missing)
            raise
        except _sdk_errors() as e:
            raise google_error(e, endpoint, self.name) from None
        return self.price(parse_response(data, info, self.model), endpoint)

    def _client(self, endpoint: GoogleEndpoint) -> Any:
        """The SDK client for `endpoint` (one per worker, endpoint and event loop)."""
        genai = import_sdk(self.sdk, self.extra, self.name)
        if self.client is not None:
            return self.client
        remember_secrets(endpoint)
        key = ("google.genai", endpoint.vertexai, endpoint.base_url, endpoint.api_key,
               endpoint.project, endpoint.location, id(self.credentials))
        return cached_client(key, lambda: _make_client(genai, endpoint, self.credentials))


@dataclass(frozen=True)
class GoogleVertexModel(GoogleModel):
    """A Gemini model on Vertex AI (`google-vertex:<model>`): `GoogleModel(vertexai=True)`."""

    vertexai: bool | None = True

    prefix: ClassVar[str] = "google-vertex"
    url_env: ClassVar[str] = "GOOGLE_VERTEX_BASE_URL"


def _make_client(genai: Any, endpoint: GoogleEndpoint, credentials: Any) -> Any:
    from google.genai import types

    options = types.HttpOptions(base_url=endpoint.base_url,
                                retry_options=types.HttpRetryOptions(attempts=1))
    if endpoint.vertexai and not endpoint.api_key:
        return genai.Client(vertexai=True, project=endpoint.project, location=endpoint.location,
                            credentials=credentials, http_options=options)
    return genai.Client(vertexai=endpoint.vertexai, api_key=endpoint.api_key, http_options=options)


def _with_extra(config: dict[str, Any], extra: Mapping[str, Any], fields: set[str]) -> dict[str, Any]:
    """The config with `ModelSettings.extra`: `GenerateContentConfig` fields (`top_k`,
    `safety_settings`, ...) join it, other keys go into the request body as written; and this
    request's HTTP options: one attempt, the activity's timeout."""
    body = {k: v for k, v in extra.items() if k not in fields}
    options: dict[str, Any] = {"timeout": max(int(request_timeout() * 1000), 1),
                               "retry_options": {"attempts": 1}}
    if body:
        options["extra_body"] = body
    return {**config, **{k: v for k, v in extra.items() if k in fields},
            "automatic_function_calling": {"disable": True}, "http_options": options}


async def _streamed(client: Any, model: str, contents: list[dict[str, Any]],
                    config: dict[str, Any]) -> dict[str, Any]:
    """A streamed request (`streamGenerateContent?alt=sse`): each piece of text reported as it
    comes (thoughts as thinking), the chunks gathered into the whole answer."""
    chunks: list[dict[str, Any]] = []
    stream = await client.aio.models.generate_content_stream(model=model, contents=contents,
                                                             config=config)
    async for chunk in stream:
        data: dict[str, Any] = chunk.model_dump(exclude_none=True)
        for candidate in items(data.get("candidates"))[:1]:
            for part in items(field_map(candidate.get("content")).get("parts")):
                if part.get("text"):
                    report = thinking_delta if part.get("thought") else text_delta
                    report(str(part["text"]))
        chunks.append(data)
    answer = merge_chunks(chunks)
    finished = answer["candidates"][0].get("finish_reason")
    if not finished and not field_map(answer.get("prompt_feedback")).get("block_reason"):
        raise ModelConnectionError("google: the stream ended before the answer was complete")
    return answer


def merge_chunks(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Streamed `GenerateContentResponse` chunks gathered into the one answer they make: text
    pieces joined (thoughts apart from the answer; a signed piece ends its part), function
    calls as they came, the last finish reason, usage and model version."""
    parts: list[dict[str, Any]] = []
    answer: dict[str, Any] = {}
    candidate: dict[str, Any] = {}
    for chunk in chunks:
        for key in ("usage_metadata", "model_version", "response_id", "prompt_feedback"):
            if chunk.get(key):
                answer[key] = chunk[key]
        for c in items(chunk.get("candidates"))[:1]:
            candidate.update({k: c[k] for k in ("finish_reason", "finish_message") if c.get(k)})
            for key in ("grounding_metadata", "url_context_metadata"):  # on the last chunk
                if c.get(key):
                    candidate[key] = c[key]
            for part in items(field_map(c.get("content")).get("parts")):
                last = parts[-1] if parts else None
                if (last is not None and "text" in part and "text" in last
                        and bool(part.get("thought")) == bool(last.get("thought"))
                        and not last.get("thought_signature")):
                    last["text"] += str(part["text"])
                    if part.get("thought_signature"):
                        last["thought_signature"] = part["thought_signature"]
                else:
                    parts.append(dict(part))
    candidate["content"] = {"role": "model", "parts": parts}
    answer["candidates"] = [candidate]
    return answer


# --- errors --------------------------------------------------------------------------------


def _retry_info(error: Mapping[str, Any]) -> float | None:
    """Seconds from a `google.rpc.RetryInfo` detail (`"retryDelay": "37s"`), Gemini's way of
    saying when to retry a 429."""
    for detail in items(error.get("details")):
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = str(detail.get("retryDelay") or "").strip().removesuffix("s")
            try:
                return max(float(delay), 0.0)
            except ValueError:
                return None
    return None


def gemini_error(status: int, body: Any, headers: Mapping[str, str] | None,
                 endpoint: Endpoint) -> ModelHTTPError:
    """The `ModelHTTPError` for a Gemini error answer (`{"error": {code, message, status,
    details}}`): its message and status, the retry delay, and whether the context overflowed."""
    error = field_map(field_map(body).get("error")) or field_map(body)
    message = str(error.get("message") or f"HTTP {status}")
    state = error.get("status")
    err = status_error("google", status, {"error": {"message": message, "code": state}},
                       headers, endpoint)
    delay = err.retry_after if err.retry_after is not None else _retry_info(error)
    overflow = err.context_overflow or (status == 400 and bool(_OVERFLOW.search(message)))
    return ModelHTTPError(status, err.body, delay, context_overflow=overflow)


def _sdk_errors() -> tuple[type[Exception], ...]:
    """What the SDK raises: its API errors, its HTTP libraries' and `google.auth`'s, and the
    `ValueError` / `TypeError` of a request it refused to build (pydantic's included)."""
    from google.genai import errors

    found: list[type[Exception]] = [errors.APIError, ValueError, TypeError, OSError]
    found += [e for e in _transport_errors() if issubclass(e, Exception)]
    try:
        from google.auth import exceptions
    except ImportError:
        return tuple(found)
    return (*found, exceptions.GoogleAuthError)


def _transport_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for module, name in (("aiohttp", "ClientError"), ("httpx", "TransportError"),
                         ("httpx2", "TransportError"), ("google.auth.exceptions", "TransportError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def google_error(e: Exception, endpoint: Endpoint, model_name: str = "google") -> Exception:
    """The towline error for an exception of the SDK (messages scrubbed of key and endpoint)."""
    from google.genai import errors

    if isinstance(e, errors.APIError):
        response: Any = getattr(e, "response", None)
        raw: Any = getattr(response, "headers", None) or {}
        headers = {str(k).lower(): str(v) for k, v in raw.items()}
        details: Any = getattr(e, "details", None)
        return gemini_error(int(e.code or 500), details, headers, endpoint)
    if isinstance(e, _transport_errors()):
        return connection_error("google", e, endpoint)
    auth = _auth_error(e, model_name)
    if auth is not None:
        return auth
    if isinstance(e, json.JSONDecodeError):  # a garbled answer: retried like a broken one
        return RuntimeError(endpoint.scrub(f"google: the answer was not JSON: {e}"))
    if isinstance(e, ValueError | TypeError):  # the SDK refused the request before sending it
        return ModelHTTPError(400, endpoint.scrub(f"google: invalid request: {e}"))
    return RuntimeError(endpoint.scrub(f"google: {type(e).__name__}: {e}"))


def _auth_error(e: Exception, model_name: str) -> Exception | None:
    """Vertex AI without usable credentials: a configuration error (found none) or a final
    401 (they were refused)."""
    try:
        from google.auth import exceptions
    except ImportError:
        return None
    if isinstance(e, exceptions.DefaultCredentialsError):
        return ConfigurationError(
            f"model {model_name!r} found no Google Cloud credentials on the worker: set "
            f"GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login` "
            f"(or use an API key)")
    if isinstance(e, exceptions.RefreshError):
        return ModelHTTPError(401, "google: the Google Cloud credentials were refused")
    return None
