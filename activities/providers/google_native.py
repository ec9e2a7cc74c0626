"""Gemini's built-in tools: native tools to `generateContent`, and what it answers, back.

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
import re
from collections.abc import Mapping, Sequence
from typing import Any

from towline.messages import NativeToolCallPart, NativeToolReturnPart, ResponsePart, TextPart
from towline.native_tools import CodeExecution, NativeTool, WebFetch, WebSearch

from ._common import field_map, items
from .native import refuse_options, unsupported, uses_of

__all__ = ["FAMILY", "native_tool_entries", "code_part", "grounding_parts", "cite",
           "native_part_back", "gemini_uses"]

FAMILY = "google"
_MAJOR = re.compile(r"gemini-(\d+)")
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
