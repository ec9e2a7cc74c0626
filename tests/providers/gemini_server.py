"""Gemini's wire format for the fake provider: its answers, its SSE stream, and its rules.

- Answers: `answer(parts, ...)` is a `GenerateContentResponse` exactly as the API sends it
  (camelCase, `thoughtSignature` as base64), made of `text`, `thought` and `call` parts;
  `blocked(reason, ...)` an answer Gemini stopped (a filter, Model Armor, a malformed call)
  or a prompt it blocked, in the shape real ones have (no `content`, a `finishMessage`).
- Streaming (`:streamGenerateContent?alt=sse`): `gemini_events` cuts an answer into the
  chunks Gemini streams (`data: {chunk}` lines ended by a blank CRLF line): text in pieces,
  thoughts apart, a text's signature on a last empty piece, each function call whole, the
  finish reason and the whole usage on the last chunk.
- Rules (`GeminiWire(server).install()`): what the real API refuses, with its status and
  error body (`{"error": {"code", "message", "status"}}`). The API reads field names in
  snake_case and camelCase alike (protobuf JSON), and so do these rules:
  - no API key (403 `PERMISSION_DENIED`, Vertex AI: 401 `UNAUTHENTICATED`), a wrong one
    (400 `API key not valid`), a missing or wrong OAuth token on a Vertex AI project path;
  - an empty `contents`, a content without parts, a role other than `user` / `model`;
  - a media type Gemini does not read (`Unsupported MIME type: ...`);
  - a function-call turn that does not follow a user turn, and function responses whose
    number differs from the calls of the turn before;
  - thought signatures: a function call of the current turn sent back without the signature
    it was issued with ("Function call is missing a thought_signature in functionCall
    parts..."), and any signature the server never issued ("Corrupted thought signature.");
  - `additionalProperties` in a proto `Schema` (`response_schema`, a declaration's
    `parameters`): only the `*_json_schema` fields take full JSON Schema.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

from fake_server import FakeProvider, Recorded, Reply
from sse import Event, pieces

__all__ = ["answer", "text", "thought", "call", "blocked", "api_error", "gemini_events", "gemini_encode",
           "GeminiWire", "decoded", "MISSING_SIGNATURE", "CORRUPTED_SIGNATURE", "RESPONSE_COUNT",
           "CALL_ORDER"]

MISSING_SIGNATURE = ("Function call is missing a thought_signature in functionCall parts. This is "
                     "required for tools to work correctly, and missing thought_signature may lead "
                     "to degraded model performance. Additional data, function call "
                     "`default_api:{name}` , position {position}. Please refer to "
                     "https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")
CORRUPTED_SIGNATURE = "Corrupted thought signature."
RESPONSE_COUNT = ("Please ensure that the number of function response parts is equal to the number "
                  "of function call parts of the function call turn.")
CALL_ORDER = ("Please ensure that function call turn comes immediately after a user turn or after "
              "a function response turn.")
MEDIA_TYPES = frozenset({
    "image/png", "image/jpeg", "image/webp", "image/heic", "image/heif", "application/pdf",
    "text/plain", "text/html", "text/css", "text/csv", "text/xml", "text/markdown", "text/rtf",
    "audio/wav", "audio/mp3", "audio/mpeg", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac",
    "video/mp4", "video/mpeg", "video/mov", "video/avi", "video/webm", "video/3gpp",
})
"""What Gemini's image, document, audio and video guides list (written out here on purpose,
not imported from the provider code under test)."""

# --- answers -------------------------------------------------------------------------------


def text(content: str, signature: str | None = None) -> dict[str, Any]:
    """A text part of an answer."""
    return {"text": content, **({"thoughtSignature": signature} if signature else {})}


def thought(content: str, signature: str | None = None) -> dict[str, Any]:
    """A thought summary part (`include_thoughts`)."""
    return {"text": content, "thought": True, **({"thoughtSignature": signature} if signature else {})}


def call(name: str, args: dict[str, Any], signature: str | None = None,
         id: str | None = None) -> dict[str, Any]:
    """A function call part (Gemini's Developer API gives no `id`; Vertex AI may)."""
    function: dict[str, Any] = {"name": name, "args": args, **({"id": id} if id else {})}
    return {"functionCall": function, **({"thoughtSignature": signature} if signature else {})}


def answer(parts: list[dict[str, Any]], finish: str = "STOP", *, model: str = "gemini-2.5-flash",
           prompt: int = 10, output: int = 5, thoughts: int = 0, cached: int = 0) -> dict[str, Any]:
    """A `GenerateContentResponse`."""
    usage: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": output,
                             "totalTokenCount": prompt + output + thoughts,
                             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    if cached:
        usage["cachedContentTokenCount"] = cached
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish,
                            "index": 0}],
            "usageMetadata": usage, "modelVersion": model, "responseId": "gx7dZ9qBHpWz1MkP"}


def blocked(finish: str, message: str = "", *, prompt: int = 10, output: int = 0, thoughts: int = 0,
            prompt_blocked: bool = False, model: str = "gemini-2.5-flash") -> dict[str, Any]:
    """An answer Gemini stopped (`finish`: `SAFETY`, `MODEL_ARMOR`, `MALFORMED_FUNCTION_CALL`,
    ...), as the real API sends one: a candidate with no `content` at all, the reason and its
    `finishMessage`, and the tokens billed (thinking included). `prompt_blocked`: the prompt was
    blocked (`finish` is the `blockReason`): no candidate, and usage with no token counts.

    The shapes of real Vertex AI answers (Model Armor on the answer and on the prompt) and of a
    real Gemini `SAFETY` block, as pydantic-ai's recordings of them have them."""
    head = {"createTime": "2026-01-01T00:00:00.000000Z", "modelVersion": model,
            "responseId": "QVRhatDkAeqe7dcPlP-i8QM"}
    if prompt_blocked:
        feedback = {"blockReason": finish, **({"blockReasonMessage": message} if message else {})}
        return {**head, "promptFeedback": feedback, "usageMetadata": {"trafficType": "ON_DEMAND"}}
    usage: dict[str, Any] = {"promptTokenCount": prompt, "totalTokenCount": prompt + output + thoughts,
                             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if output:
        usage["candidatesTokenCount"] = output
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    candidate = {"finishReason": finish, **({"finishMessage": message} if message else {})}
    return {**head, "candidates": [candidate], "usageMetadata": usage}


def api_error(code: int, status: str, message: str, details: list[Any] | None = None) -> Reply:
    """An error answer as Google APIs give it."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return Reply({"error": error}, status=code)


# --- streaming -----------------------------------------------------------------------------


def gemini_events(body: dict[str, Any]) -> list[Event]:
    """The chunks Gemini streams for the answer `body`."""
    if "content" not in (body.get("candidates") or [{}])[0]:  # a blocked answer: one chunk
        return [(None, body)]
    candidate = body["candidates"][0]
    head = {k: body[k] for k in ("modelVersion", "responseId") if k in body}
    prompt = {"promptTokenCount": body["usageMetadata"]["promptTokenCount"]}
    chunks: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        if "text" in part:
            flag = {"thought": True} if part.get("thought") else {}
            chunks += [{"text": p, **flag} for p in pieces(part["text"])]
            if part.get("thoughtSignature"):
                chunks.append({"text": "", **flag, "thoughtSignature": part["thoughtSignature"]})
        else:
            chunks.append(part)
    out: list[Event] = []
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        event: dict[str, Any] = {"candidates": [{
            "content": {"role": "model", "parts": [chunk]}, "index": 0,
            **({"finishReason": candidate["finishReason"]} if last else {})}],
            "usageMetadata": body["usageMetadata"] if last else prompt, **head}
        out.append((None, event))
    return out


def gemini_encode(event: Event) -> bytes:
    """One chunk on the wire, as Gemini frames it."""
    return f"data: {json.dumps(event[1])}\r\n\r\n".encode()


# --- rules ---------------------------------------------------------------------------------


def _get(obj: Any, name: str) -> Any:
    """A field by its snake_case name or its camelCase one (protobuf JSON reads both)."""
    if not isinstance(obj, dict):
        return None
    fields: dict[str, Any] = obj  # pyright: ignore[reportUnknownVariableType]
    if name in fields:
        return fields[name]
    return fields.get(re.sub(r"_(\w)", lambda m: m.group(1).upper(), name))


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []  # pyright: ignore[reportUnknownArgumentType]


def decoded(signature: Any) -> bytes | None:
    """A signature's bytes, whichever base64 alphabet carried it (None: no signature; a
    malformed one decodes to bytes no answer issued)."""
    if not isinstance(signature, str) or not signature:
        return None
    try:
        return base64.b64decode(signature.replace("-", "+").replace("_", "/")
                                + "=" * (-len(signature) % 4), validate=True)
    except (binascii.Error, ValueError):
        return b"\x00invalid"


def _bad(message: str, code: int = 400, status: str = "INVALID_ARGUMENT") -> Reply:
    return api_error(code, status, message)


class GeminiWire:
    """Gemini's rules on a `FakeProvider`; `script` queues answers and remembers the thought
    signatures they issue."""

    def __init__(self, server: FakeProvider, key: str, token: str = "ya29.test-token") -> None:
        self.server = server
        self.key = key
        self.token = token
        self.issued: dict[str, set[bytes]] = {}
        """Function call (name and arguments) -> the signatures it was issued with."""
        self.signatures: set[bytes] = set()

    def install(self) -> GeminiWire:
        rules: list[Callable[[Recorded], Reply | None]] = [
            self.auth, self.shape, self.media, self.turns, self.thought_signatures, self.schemas]
        self.server.rules += rules
        return self

    def script(self, *replies: Reply | dict[str, Any]) -> None:
        """Queue answers (a body, or a `Reply`), noting the signatures each one issues."""
        queued = [r if isinstance(r, Reply) else Reply(r) for r in replies]
        for reply in queued:
            for candidate in _list(_get(reply.body, "candidates")):
                for part in _list(_get(_get(candidate, "content"), "parts")):
                    signature = decoded(_get(part, "thought_signature"))
                    if signature is None:
                        continue
                    self.signatures.add(signature)
                    function = _get(part, "function_call")
                    if function is not None:
                        self.issued.setdefault(self._call_key(function), set()).add(signature)
        self.server.script(*queued)

    @staticmethod
    def _call_key(function: Any) -> str:
        return json.dumps([_get(function, "name"), _get(function, "args") or {}], sort_keys=True)

    @staticmethod
    def _contents(r: Recorded) -> list[Any]:
        return _list(_get(r.body, "contents"))

    def auth(self, r: Recorded) -> Reply | None:
        key = r.headers.get("x-goog-api-key")
        bearer = r.headers.get("authorization", "")
        if "/projects/" in r.path:  # Vertex AI with a project: an OAuth access token
            if not bearer:
                return _bad("Request is missing required authentication credential. Expected OAuth "
                            "2 access token, login cookie or other valid authentication credential. "
                            "See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                            401, "UNAUTHENTICATED")
            if bearer != f"Bearer {self.token}":
                return _bad("Request had invalid authentication credentials. Expected OAuth 2 access "
                            "token, login cookie or other valid authentication credential.",
                            401, "UNAUTHENTICATED")
            return None
        if key is None:
            if "/publishers/" in r.path:
                return _bad("API keys are not supported by this API. Expected OAuth2 access token "
                            "or other authentication credentials that assert a principal.",
                            401, "UNAUTHENTICATED")
            return _bad("Method doesn't allow unregistered callers (callers without established "
                        "identity). Please use API Key or other form of API consumer identity to "
                        "call this API.", 403, "PERMISSION_DENIED")
        if key != self.key:
            return api_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                             [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                               "reason": "API_KEY_INVALID", "domain": "googleapis.com"}])
        return None

    def shape(self, r: Recorded) -> Reply | None:
        contents = self._contents(r)
        if not contents:
            return _bad("* GenerateContentRequest.contents: contents is not specified\n")
        for i, content in enumerate(contents):
            if _get(content, "role") not in ("user", "model"):
                return _bad("Please use a valid role: user, model.")
            if not _list(_get(content, "parts")):
                return _bad(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not "
                            f"be empty.\n")
        return None

    def media(self, r: Recorded) -> Reply | None:
        for content in self._contents(r):
            for part in _list(_get(content, "parts")):
                for field in ("inline_data", "file_data"):
                    blob = _get(part, field)
                    kind = _get(blob, "mime_type")
                    if blob is not None and kind not in MEDIA_TYPES:
                        return _bad(f"Unsupported MIME type: {kind}")
        return None

    def turns(self, r: Recorded) -> Reply | None:
        contents = self._contents(r)
        for i, content in enumerate(contents):
            parts = _list(_get(content, "parts"))
            calls = [p for p in parts if _get(p, "function_call") is not None]
            responses = [p for p in parts if _get(p, "function_response") is not None]
            if calls and (i == 0 or _get(contents[i - 1], "role") != "user"):
                return _bad(CALL_ORDER)
            if responses:
                before = _list(_get(contents[i - 1], "parts")) if i else []
                asked = [p for p in before if _get(p, "function_call") is not None]
                if len(asked) != len(responses):
                    return _bad(RESPONSE_COUNT)
        return None

    def thought_signatures(self, r: Recorded) -> Reply | None:
        contents = self._contents(r)
        prompts = [i for i, c in enumerate(contents) if _get(c, "role") == "user" and any(
            _get(p, "function_response") is None for p in _list(_get(c, "parts")))]
        turn_start = prompts[-1] if prompts else 0  # only the current turn must be signed
        for i, content in enumerate(contents):
            for part in _list(_get(content, "parts")):
                signature = decoded(_get(part, "thought_signature"))
                if signature is not None and signature not in self.signatures:
                    return _bad(CORRUPTED_SIGNATURE)
                function = _get(part, "function_call")
                if function is None or i < turn_start or _get(content, "role") != "model":
                    continue
                issued = self.issued.get(self._call_key(function))
                if issued and signature is None:
                    return _bad(MISSING_SIGNATURE.format(name=_get(function, "name"), position=i + 1))
                if issued and signature not in issued:
                    return _bad(CORRUPTED_SIGNATURE)
        return None

    def schemas(self, r: Recorded) -> Reply | None:
        config = _get(r.body, "generation_config")
        if "additionalProperties" in json.dumps(_get(config, "response_schema") or {}):
            return _bad('Invalid JSON payload received. Unknown name "additionalProperties" at '
                        "'generation_config.response_schema': Cannot find field.")
        for t, tool in enumerate(_list(_get(r.body, "tools"))):
            for d, declaration in enumerate(_list(_get(tool, "function_declarations"))):
                if "additionalProperties" in json.dumps(_get(declaration, "parameters") or {}):
                    return _bad(f'Invalid JSON payload received. Unknown name "additionalProperties" '
                                f"at 'tools[{t}].function_declarations[{d}].parameters': Cannot find "
                                f"field.")
        return None
