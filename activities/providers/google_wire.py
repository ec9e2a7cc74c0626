"""Gemini's `generateContent` wire format: towline messages to `contents` and `config`, and
an answer (or its streamed chunks) back to a `ModelResponse`. Pure functions.

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
- Native tools (`google_native`): `google_search`, `url_context` and `code_execution`; code
  parts go back as they came, grounding metadata stays in the history.
- Native output: `response_mime_type: application/json` with the output's strict schema as
  `response_json_schema` (full JSON Schema; `response_schema`, a proto `Schema`, refuses
  `additionalProperties`). Tool definitions likewise go as `parameters_json_schema`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

from towline.messages import (
    BinaryContent,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
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
from towline.options import Thinking
from towline.runtime.model_types import ModelInfo
from towline.runtime.output_schema import strict_schema

from ._common import field_map, items, own_thinking, retry_text, return_text, unsupported_media
from ._media import Media, data_url_bytes, media_type
from .google_native import (
    cite,
    code_part,
    gemini_uses,
    grounding_parts,
    native_part_back,
    native_tool_entries,
)

__all__ = ["GEMINI_MEDIA_TYPES", "EFFORT_BUDGETS", "FINISH_REASONS", "BLOCKED_PROMPT", "gemini_contents",
           "gemini_config", "thinking_config", "parse_response", "signature_text",
           "signature_bytes", "media_part"]

FAMILY = "google"
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
_MAJOR = re.compile(r"gemini-(\d+)")


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
