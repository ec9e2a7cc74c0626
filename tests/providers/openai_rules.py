"""The OpenAI APIs' wire rules, enforced by the fake provider as the real APIs enforce them.

Each rule sees every request (`FakeProvider.rules`) and returns the 400 the real API answers
a request that breaks it with, in its exact shape
(`{"error": {"message", "type": "invalid_request_error", "param", "code"}}`) and, where
known, its exact wording; or None.

Responses API (`ResponsesWire`): the fake's reasoning items carry an HMAC-signed
`encrypted_content` it can verify, so it refuses, like the real API,
- a reasoning item whose encrypted content was changed (or is missing, `store` being off),
- a function call sent with its item id but without the reasoning item it came after,
- a reasoning item sent without the item that followed it,
- a `function_call_output` with no `function_call` before it (and a call with no output),
- an `input_image` or `input_file` of a media type it cannot take, or bytes without a file
  name, and a strict `text.format` schema that is not strict-compatible.
It answers with encrypted content only when the request asked for it
(`include=["reasoning.encrypted_content"]`), as the real API does.

Chat Completions (`chat_rules`): a `tool` message that answers no `tool_calls` id of the
assistant message before it, an assistant's call left without its `tool` message, a
non-text part in a `tool` message (why a tool's images go in a user message), an image or
file part of the wrong media type, and a strict `json_schema` response format whose schema
is not strict-compatible (an object not closed, a property not required).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from fake_server import Recorded, Reply

__all__ = ["refusal", "ResponsesWire", "chat_rules", "strict_problem", "IMAGE_TYPES",
           "FILE_TYPES"]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
FILE_TYPES = frozenset({"application/pdf", "text/plain", "text/markdown", "text/csv",
                        "application/json"})
"""The document types the fake's Responses API takes (a subset of the real list)."""

Rule = Callable[[Recorded], Reply | None]


def refusal(message: str, param: str | None = None, code: str | None = None) -> Reply:
    """A 400 in OpenAI's error shape."""
    return Reply({"error": {"message": message, "type": "invalid_request_error", "param": param,
                            "code": code}}, status=400)


def _path(recorded: Recorded) -> str:
    return urlsplit(recorded.path).path


def _data_type(url: Any) -> str | None:
    """The media type of a `data:` URL (None for any other URL)."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    return url[5:].split(",", 1)[0].split(";")[0].lower()


def strict_problem(schema: Any, name: str) -> str | None:
    """Why a strict response-format schema is refused (the real API's wording), or None."""

    def walk(node: Any, context: tuple[str, ...]) -> str | None:
        if isinstance(node, list):
            for item in node:  # pyright: ignore[reportUnknownVariableType]
                found = walk(item, context)
                if found:
                    return found
            return None
        if not isinstance(node, dict):
            return None
        prefix = f"Invalid schema for response_format '{name}': In context={context!r}, "
        if node.get("type") == "object" or "properties" in node:
            if node.get("additionalProperties") is not False:
                return prefix + "'additionalProperties' is required to be supplied and to be false."
            props: dict[str, Any] = node.get("properties") or {}
            required = node.get("required") or []
            missing = [k for k in props if k not in required]
            if missing:
                return (prefix + "'required' is required to be supplied and to be an array "
                        f"including every key in properties. Missing '{missing[0]}'.")
            for key, sub in props.items():
                found = walk(sub, (*context, "properties", key))
                if found:
                    return found
        for key in ("items", "anyOf", "$defs", "definitions"):
            if key in node:
                sub = node[key]
                if key in ("$defs", "definitions") and isinstance(sub, dict):
                    for def_name, item in sub.items():  # pyright: ignore[reportUnknownVariableType]
                        found = walk(item, (*context, key, str(def_name)))  # pyright: ignore[reportUnknownArgumentType]
                        if found:
                            return found
                else:
                    found = walk(sub, (*context, key))
                    if found:
                        return found
        if "default" in node:
            return prefix + "'default' is not permitted."
        return None

    return walk(schema, ())


class ResponsesWire:
    """The fake Responses API's reasoning items and the rules that check them coming back."""

    def __init__(self, secret: bytes = b"fake-openai-reasoning-key") -> None:
        self.secret = secret
        self.requires: dict[str, str] = {}
        """A function call's item id -> the reasoning item id it must come after."""
        self.follows: dict[str, str] = {}
        """A reasoning item id -> the id of the item that followed it."""

    # --- answers -------------------------------------------------------------------------

    def seal(self, item_id: str, summary: list[str]) -> str:
        """A reasoning item's encrypted content: its id and summary, signed."""
        payload = base64.urlsafe_b64encode(json.dumps({"id": item_id, "summary": summary}).encode())
        mac = hmac.new(self.secret, payload, hashlib.sha256).hexdigest()
        return f"{payload.decode()}.{mac}"

    def opens(self, token: Any, item_id: Any) -> bool:
        """Whether `token` is encrypted content this fake made for the item `item_id`."""
        if not isinstance(token, str) or "." not in token:
            return False
        payload, mac = token.rsplit(".", 1)
        expected = hmac.new(self.secret, payload.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, expected):
            return False
        try:
            return json.loads(base64.urlsafe_b64decode(payload))["id"] == item_id
        except (ValueError, KeyError):
            return False

    def reasoned(self, reasoning_id: str, summary: list[str],
                 calls: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
        """Output items: a reasoning item, then the function calls `(call_id, name,
        arguments)` it led to (item ids `fc_<call_id>`), recorded as belonging together."""
        out: list[dict[str, Any]] = [{
            "type": "reasoning", "id": reasoning_id, "status": None,
            "summary": [{"type": "summary_text", "text": s} for s in summary],
            "encrypted_content": self.seal(reasoning_id, summary),
        }]
        for call_id, name, arguments in calls:
            fc = f"fc_{call_id}"
            self.requires[fc] = reasoning_id
            out.append({"type": "function_call", "id": fc, "call_id": call_id, "name": name,
                        "arguments": arguments, "status": "completed"})
        if calls:
            self.follows[reasoning_id] = f"fc_{calls[0][0]}"
        return out

    def reasoning(self, reasoning_id: str, summary: list[str], following: str) -> dict[str, Any]:
        """A reasoning item that led to the item `following` (a built-in tool's call, say),
        recorded as belonging together."""
        self.follows[reasoning_id] = following
        return {"type": "reasoning", "id": reasoning_id, "status": None,
                "summary": [{"type": "summary_text", "text": s} for s in summary],
                "encrypted_content": self.seal(reasoning_id, summary)}

    @staticmethod
    def answer(body: dict[str, Any]) -> Callable[[Recorded], Reply]:
        """A scripted reply that carries reasoning items' encrypted content only when the
        request asked for it, as the real API does."""

        def reply(recorded: Recorded) -> Reply:
            include = (recorded.body or {}).get("include") or []
            out = copy.deepcopy(body)
            if "reasoning.encrypted_content" not in include:
                for item in out.get("output") or []:
                    if item.get("type") == "reasoning":
                        item["encrypted_content"] = None
            return Reply(out)

        return reply

    # --- rules ---------------------------------------------------------------------------

    def rules(self) -> list[Rule]:
        """The Responses API's rules, for `FakeProvider.rules`."""
        return [self.check_reasoning, check_calls_answered, check_responses_media,
                check_text_format]

    def check_reasoning(self, recorded: Recorded) -> Reply | None:
        """Reasoning items: intact, each followed by its item; calls after their reasoning."""
        if not _path(recorded).endswith("/responses"):
            return None
        items: list[dict[str, Any]] = [i for i in recorded.body.get("input") or []
                                       if isinstance(i, dict)]
        seen: set[str] = set()
        for n, item in enumerate(items):
            kind, item_id = item.get("type"), item.get("id")
            if kind == "reasoning":
                if not item.get("encrypted_content"):
                    return refusal(f"Item with id '{item_id}' not found. Items are not persisted "
                                   "when `store` is set to false. Try again with `store` set to "
                                   "true, or remove this item from your input.", "input")
                if not self.opens(item["encrypted_content"], item_id):
                    return refusal(f"The encrypted content for item {item_id} could not be "
                                   "verified. Reason: Encrypted content could not be decrypted "
                                   "or parsed.", None, "invalid_encrypted_content")
                after = next((i for i in items[n + 1:] if i.get("type") != "reasoning"), {})
                wanted = self.follows.get(str(item_id))
                if wanted is not None and after.get("id") != wanted:
                    return refusal(f"Item '{item_id}' of type 'reasoning' was provided without "
                                   "its required following item.", "input")
                seen.add(str(item_id))
            elif kind == "function_call" and item_id in self.requires:
                reasoning = self.requires[str(item_id)]
                if reasoning not in seen:
                    return refusal(f"Item '{item_id}' of type 'function_call' was provided "
                                   f"without its required 'reasoning' item: '{reasoning}'.",
                                   "input")
        return None


def check_calls_answered(recorded: Recorded) -> Reply | None:
    """Every `function_call_output` answers an earlier call; every call has its output."""
    if not _path(recorded).endswith("/responses"):
        return None
    items = [i for i in recorded.body.get("input") or [] if isinstance(i, dict)]
    calls = [i.get("call_id") for i in items if i.get("type") == "function_call"]
    called: set[Any] = set()
    for item in items:
        if item.get("type") == "function_call":
            called.add(item.get("call_id"))
        elif item.get("type") == "function_call_output" and item.get("call_id") not in called:
            return refusal("No tool call found for function call output with call_id "
                           f"{item.get('call_id')}.", "input")
    answered = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    for call_id in calls:
        if call_id not in answered:
            return refusal(f"No tool output found for function call {call_id}.", "input")
    return None


def _responses_part(part: Mapping[str, Any], where: str) -> Reply | None:
    kind = part.get("type")
    if kind == "input_image":
        media = _data_type(part.get("image_url"))
        if media is not None and media not in IMAGE_TYPES:
            return refusal(f"Invalid '{where}.image_url'. Expected a base64-encoded data URL with "
                           "an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='),"
                           f" but got unsupported MIME type '{media}'.", f"{where}.image_url",
                           "invalid_value")
    elif kind == "input_file" and part.get("file_data") is not None:
        if not part.get("filename"):
            return refusal(f"Missing required parameter: '{where}.filename'.", f"{where}.filename",
                           "missing_required_parameter")
        media = _data_type(part.get("file_data"))
        if media not in FILE_TYPES:
            return refusal(f"Invalid input: Expected file type to be a supported format, but got "
                           f"'{media}'.", f"{where}.file_data", "unsupported_file")
    return None


def check_responses_media(recorded: Recorded) -> Reply | None:
    """Images and files in messages and tool outputs are of types the API takes."""
    if not _path(recorded).endswith("/responses"):
        return None
    for n, item in enumerate(recorded.body.get("input") or []):
        for key in ("content", "output"):
            parts = item.get(key)
            if not isinstance(parts, list):
                continue
            for k, part in enumerate(parts):  # pyright: ignore[reportUnknownVariableType]
                refused = _responses_part(part, f"input[{n}].{key}[{k}]")  # pyright: ignore[reportUnknownArgumentType]
                if refused is not None:
                    return refused
    return None


def check_text_format(recorded: Recorded) -> Reply | None:
    """A strict `text.format` json_schema must be strict-compatible."""
    if not _path(recorded).endswith("/responses"):
        return None
    fmt = ((recorded.body.get("text") or {}).get("format") or {})
    if fmt.get("type") == "json_schema" and fmt.get("strict"):
        problem = strict_problem(fmt.get("schema"), str(fmt.get("name")))
        if problem:
            return refusal(problem, "text.format.schema", "invalid_json_schema")
    return None


# --- Chat Completions --------------------------------------------------------------------


def chat_rules() -> list[Rule]:
    """The Chat Completions API's rules, for `FakeProvider.rules`."""
    return [check_tool_messages, check_chat_parts, check_response_format]


def check_tool_messages(recorded: Recorded) -> Reply | None:
    """`tool` messages answer the calls of the assistant message right before them, all."""
    if not _path(recorded).endswith("/chat/completions"):
        return None
    messages: list[dict[str, Any]] = recorded.body.get("messages") or []
    pending: list[str] = []
    asked_at = 0
    for n, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                return refusal("Invalid parameter: messages with role 'tool' must be a response "
                               "to a preceeding message with 'tool_calls'.", f"messages.[{n}].role")
            pending.remove(m["tool_call_id"])
            continue
        if pending:
            return refusal("An assistant message with 'tool_calls' must be followed by tool "
                           "messages responding to each 'tool_call_id'. The following "
                           f"tool_call_ids did not have response messages: {', '.join(pending)}",
                           f"messages.[{asked_at}].role")
        if role == "assistant" and m.get("tool_calls"):
            pending = [c.get("id") for c in m["tool_calls"]]
            asked_at = n
    return None


def check_chat_parts(recorded: Recorded) -> Reply | None:
    """Only text in `tool` messages; images and files of the types the API takes."""
    if not _path(recorded).endswith("/chat/completions"):
        return None
    for n, m in enumerate(recorded.body.get("messages") or []):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for k, part in enumerate(content):  # pyright: ignore[reportUnknownVariableType]
            kind = part.get("type")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            where = f"messages[{n}].content[{k}]"
            if m.get("role") == "tool" and kind != "text":
                return refusal(f"Invalid value: '{kind}'. Supported values are: 'text'.",
                               f"{where}.type", "invalid_value")
            if kind == "image_url":
                media = _data_type(part["image_url"].get("url"))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                if media is not None and media not in IMAGE_TYPES:
                    return refusal(f"Invalid '{where}.image_url.url'. Expected a base64-encoded "
                                   "data URL with an image MIME type (e.g. "
                                   "'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got "
                                   f"unsupported MIME type '{media}'.", f"{where}.image_url.url",
                                   "invalid_value")
            if kind == "file":
                media = _data_type(part["file"].get("file_data"))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                if media != "application/pdf":
                    return refusal(f"Invalid file data: '{where}.file.file_data'. Expected a PDF "
                                   f"file, but got '{media}'.", f"{where}.file.file_data",
                                   "invalid_value")
    return None


def check_response_format(recorded: Recorded) -> Reply | None:
    """A strict `json_schema` response format must be strict-compatible."""
    if not _path(recorded).endswith("/chat/completions"):
        return None
    fmt = recorded.body.get("response_format") or {}
    spec = fmt.get("json_schema") or {}
    if fmt.get("type") == "json_schema" and spec.get("strict"):
        problem = strict_problem(spec.get("schema"), str(spec.get("name")))
        if problem:
            return refusal(problem, "response_format", None)
    return None
