"""The Messages API's wire rules, enforced by the fake provider, and the answers it issues.

`rules = AnthropicRules()`, installed with `provider.rules.append(rules)`, sees
every request to `/v1/messages` (and Bedrock's `/model/<model>/invoke…`) first
and refuses, as the API does (HTTP 400, `{"type": "error", "error": {"type":
"invalid_request_error", "message": ...}}`, the API's own wording), a request:

- whose thinking settings the API refuses (a budget under 1024, `max_tokens`
  not above it, a temperature other than 1, a `top_p` under 0.95, a `top_k`);
- with more than 4 `cache_control` breakpoints;
- with a native output schema holding an object not closed;
- with a media type the API does not take, or a block type it does not know;
- with a `thinking` block whose text or signature was changed (each block the
  server issues is signed: an HMAC of its text with the server's secret), or
  a `redacted_thinking` block whose data was;
- with a `tool_result` that answers no `tool_use` of the assistant turn before
  it, or a `tool_use` left unanswered by the turn after it;
- with thinking on, whose assistant turn of the current tool loop (the one the
  last user turn's tool results answer) does not start with a thinking block.

`rules.answer(content, stop)` is a scripted reply (`FakeProvider.script`) that
signs the thinking blocks it issues and reports the usage the API would:
`PromptCache` reads and writes cached prefixes at the request's breakpoints
(a 20-block lookback, a 1024-token minimum), so a tool loop with breakpoints
reads the previous step's prefix and writes only the new part.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import unquote

from anthropic_replies import message
from fake_server import Recorded, Reply

__all__ = ["AnthropicRules", "PromptCache", "is_messages", "error_body", "THINKING_FIRST"]

THINKING_FIRST = (
    "Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, "
    "a final `assistant` message must start with a thinking block (preceeding the lastmost set of "
    "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous "
    "turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
_DOCS = "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_USER_BLOCKS = {"text", "image", "document", "tool_result", "search_result"}
_ASSISTANT_BLOCKS = {"text", "thinking", "redacted_thinking", "tool_use", "server_tool_use",
                     "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                     "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
                     "mcp_tool_use", "mcp_tool_result"}
_RESULT_BLOCKS = {"text", "image", "document", "search_result"}


def is_messages(path: str) -> bool:
    """A Messages API request: Anthropic's path, or Bedrock's invoke paths."""
    path = path.split("?", 1)[0]
    return path.endswith("/v1/messages") or (
        path.startswith("/model/") and path.endswith(("/invoke", "/invoke-with-response-stream")))


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """The API's error body."""
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in cast(list[Any], value) if isinstance(v, dict)] if isinstance(value, list) else []


def _content(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = m.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else _list(content)


class PromptCache:
    """The API's prompt cache as its usage reports it: prefixes end at breakpoints."""

    def __init__(self, min_tokens: int = 1024, lookback: int = 20) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self.stored: set[str] = set()

    @staticmethod
    def tokens(text: str) -> int:
        """A token count for text (about four characters a token)."""
        return max(1, len(text) // 4)

    @staticmethod
    def segments(body: Mapping[str, Any]) -> Iterator[tuple[str, bool]]:
        """The prompt in cache order (tools, system, messages): each block's text without
        its `cache_control`, and whether it carries one."""

        def seg(prefix: str, block: Mapping[str, Any]) -> tuple[str, bool]:
            rest = {k: v for k, v in block.items() if k != "cache_control"}
            return prefix + json.dumps(rest, sort_keys=True), "cache_control" in block

        for tool in _list(body.get("tools")):
            yield seg("tool:", tool)
        system = body.get("system")
        if isinstance(system, str):  # counted as the text block it stands for
            yield seg("system:", {"type": "text", "text": system})
        for block in _list(system):
            yield seg("system:", block)
        for m in _list(body.get("messages")):
            for block in _content(m):
                yield seg(f"{m.get('role')}:", block)

    def usage(self, body: Mapping[str, Any]) -> tuple[int, int, int]:
        """(uncached input tokens, cache reads, cache writes) of a request; remembers the
        prefixes it writes."""
        running = hashlib.sha256(str(body.get("model")).encode())
        hashes: list[str] = []
        totals: list[int] = []
        marks: list[int] = []
        total = 0
        for i, (text, marked) in enumerate(self.segments(body)):
            running.update(text.encode())
            hashes.append(running.hexdigest())
            total += self.tokens(text)
            totals.append(total)
            if marked:
                marks.append(i)
        read = 0
        for b in marks:
            for k in range(b, max(-1, b - self.lookback), -1):
                if hashes[k] in self.stored:
                    read = max(read, totals[k])
                    break
        written = 0
        if marks and totals[marks[-1]] >= self.min_tokens:
            self.stored.update(hashes[b] for b in marks if totals[b] >= self.min_tokens)
            written = max(0, totals[marks[-1]] - read)
        return total - read - written, read, written


class AnthropicRules:
    """The Messages API's rules (a `FakeProvider.rules` entry) and its signed answers."""

    def __init__(self, secret: bytes = b"fake-anthropic-secret", cache: PromptCache | None = None) -> None:
        self._secret = secret
        self.cache = cache or PromptCache()
        self.issued: set[str] = set()
        """Signatures (and redacted data) of real recorded answers this server replayed: a
        real API accepts back what it issued, which no HMAC of the fake's can check."""

    # --- what the server issues --------------------------------------------------------

    def sign(self, text: str) -> str:
        """The signature of a thinking block's text."""
        digest = hmac.new(self._secret, text.encode(), hashlib.sha256).digest()
        return base64.b64encode(b"sig1" + digest).decode()

    def redacted_data(self, text: str) -> str:
        """A `redacted_thinking` block's data: the (here only encoded) thinking, signed."""
        payload = base64.b64encode(text.encode()).decode()
        return f"{payload}.{self.sign(payload)}"

    def issue(self, block: Mapping[str, Any]) -> dict[str, Any]:
        """A content block as the server sends it: thinking signed, redacted thinking sealed."""
        out = dict(block)
        if out.get("type") == "thinking" and not out.get("signature"):
            out["signature"] = self.sign(str(out.get("thinking", "")))
        if out.get("type") == "redacted_thinking" and not out.get("data"):
            out["data"] = self.redacted_data(str(out.pop("secret", "hidden")))
        return out

    def answer(self, content: list[dict[str, Any]], stop: str = "end_turn", *,
               output_tokens: int = 40) -> Callable[[Recorded], Reply]:
        """A scripted reply: `content` issued (signed), with the usage the cache gives."""

        def reply(request: Recorded) -> Reply:
            body: Mapping[str, Any] = request.body if isinstance(request.body, dict) else {}
            model = str(body.get("model") or unquote(request.path.split("/")[2]))
            fresh, read, written = self.cache.usage(body)
            return Reply(message([self.issue(b) for b in content], stop, model=model,
                                 input_tokens=fresh, output_tokens=output_tokens,
                                 cache_read=read, cache_creation=written))

        return reply

    # --- what the server refuses -------------------------------------------------------

    def __call__(self, request: Recorded) -> Reply | None:
        if request.method != "POST" or not is_messages(request.path) or not isinstance(request.body, dict):
            return None
        problem = self.violation(cast(dict[str, Any], request.body))
        return None if problem is None else Reply(error_body(problem), status=400)

    def violation(self, body: Mapping[str, Any]) -> str | None:
        """The API's error message for the first rule `body` breaks, or None."""
        for check in (self._thinking_settings, self._breakpoints, self._output_schema,
                      self._blocks, self._tool_pairs, self._thinking_first):
            problem = check(body)
            if problem is not None:
                return problem
        return None

    @staticmethod
    def _thinking_on(body: Mapping[str, Any]) -> bool:
        thinking = body.get("thinking")
        return isinstance(thinking, dict) and cast(dict[str, Any], thinking).get("type") == "enabled"

    def _thinking_settings(self, body: Mapping[str, Any]) -> str | None:
        if not self._thinking_on(body):
            return None
        budget = cast(dict[str, Any], body["thinking"]).get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if int(body.get("max_tokens") or 0) <= budget:
            return ("`max_tokens` must be greater than `thinking.budget_tokens`. " + _DOCS
                    + "#max-tokens-and-context-window-size")
        considerations = _DOCS + "#important-considerations-when-using-extended-thinking"
        if "temperature" in body and body["temperature"] != 1:
            return "`temperature` may only be set to 1 when thinking is enabled. " + considerations
        if "top_p" in body and float(body["top_p"]) < 0.95:
            return ("`top_p` must be greater than or equal to 0.95 or unset when thinking is "
                    "enabled. " + considerations)
        if "top_k" in body:
            return "`top_k` must be unset when thinking is enabled. " + considerations
        return None

    @staticmethod
    def _breakpoints(body: Mapping[str, Any]) -> str | None:
        found = int("cache_control" in body) + sum("cache_control" in t for t in _list(body.get("tools")))
        found += sum("cache_control" in b for b in _list(body.get("system")))
        for m in _list(body.get("messages")):
            for block in _content(m):
                found += "cache_control" in block
                found += sum("cache_control" in b for b in _list(block.get("content")))
        if found > 4:
            return f"A maximum of 4 blocks with cache_control may be provided. Found {found}."
        return None

    @staticmethod
    def _output_schema(body: Mapping[str, Any]) -> str | None:
        config = body.get("output_config")
        fmt = cast(dict[str, Any], config).get("format") if isinstance(config, dict) else None
        if not isinstance(fmt, dict):
            return None
        fmt = cast(dict[str, Any], fmt)
        if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            return "output_config.format: Input should be a valid json_schema format"

        def walk(node: Any) -> bool:
            if isinstance(node, list):
                return all(walk(v) for v in cast(list[Any], node))
            if not isinstance(node, dict):
                return True
            node = cast(dict[str, Any], node)
            if node.get("type") == "object" and node.get("additionalProperties") is not False:
                return False
            return all(walk(v) for v in node.values())

        if not walk(fmt["schema"]):
            return ("output_config.format.schema: For 'object' type, 'additionalProperties' must "
                    "be explicitly set to false")
        return None

    def _media(self, where: str, block: Mapping[str, Any]) -> str | None:
        source = block.get("source")
        source = cast(dict[str, Any], source) if isinstance(source, dict) else {}
        kind, media_type = source.get("type"), source.get("media_type")
        if block.get("type") == "image" and kind == "base64" and media_type not in _IMAGE_TYPES:
            return (f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
                    f"'image/png', 'image/gif' or 'image/webp'")
        if block.get("type") == "document":
            if kind == "base64" and media_type != "application/pdf":
                return f"{where}.document.source.base64.media_type: Input should be 'application/pdf'"
            if kind == "text" and media_type != "text/plain":
                return f"{where}.document.source.text.media_type: Input should be 'text/plain'"
        if kind == "base64":
            try:
                base64.b64decode(str(source.get("data")), validate=True)
            except ValueError:
                return f"{where}.{block.get('type')}.source.base64.data: Invalid base64 data"
        return None

    def _blocks(self, body: Mapping[str, Any]) -> str | None:
        for i, m in enumerate(_list(body.get("messages"))):
            allowed = _ASSISTANT_BLOCKS if m.get("role") == "assistant" else _USER_BLOCKS
            for j, block in enumerate(_content(m)):
                where, kind = f"messages.{i}.content.{j}", block.get("type")
                if kind not in allowed:
                    return (f"{where}: Input tag '{kind}' found using 'type' does not match any of "
                            f"the expected tags: {', '.join(repr(t) for t in sorted(allowed))}")
                problem = self._media(where, block)
                inner_blocks = _list(block.get("content")) if kind == "tool_result" else []
                for k, inner in enumerate(inner_blocks):
                    if problem is None and inner.get("type") not in _RESULT_BLOCKS:
                        problem = (f"{where}.content.{k}: Input tag '{inner.get('type')}' found using "
                                   f"'type' does not match any of the expected tags")
                    problem = problem or self._media(f"{where}.content.{k}", inner)
                if kind == "thinking" and str(block.get("signature")) not in self.issued and not (
                        hmac.compare_digest(self.sign(str(block.get("thinking", ""))),
                                            str(block.get("signature", "")))):
                    problem = f"{where}: Invalid `signature` in `thinking` block"
                if kind == "redacted_thinking" and str(block.get("data")) not in self.issued:
                    payload, _, sig = str(block.get("data", "")).partition(".")
                    if not hmac.compare_digest(self.sign(payload), sig):
                        problem = f"{where}: Invalid `data` in `redacted_thinking` block"
                if problem is not None:
                    return problem
        return None

    @staticmethod
    def _tool_pairs(body: Mapping[str, Any]) -> str | None:
        messages = _list(body.get("messages"))
        for i, m in enumerate(messages):
            if m.get("role") == "assistant":
                asked = [b.get("id") for b in _content(m) if b.get("type") == "tool_use"]
                after = messages[i + 1] if i + 1 < len(messages) else None
                if not asked or after is None:
                    continue
                answered = {b.get("tool_use_id") for b in _content(after) if b.get("type") == "tool_result"}
                missing = [str(a) for a in asked if a not in answered]
                if missing:
                    return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                            f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                            f"corresponding `tool_result` block in the next message.")
                continue
            before = messages[i - 1] if i else {}
            asked_before = {b.get("id") for b in _content(before) if b.get("type") == "tool_use"}
            for j, block in enumerate(_content(m)):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked_before:
                    return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                            f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                            f"corresponding `tool_use` block in the previous message.")
        return None

    def _thinking_first(self, body: Mapping[str, Any]) -> str | None:
        messages = _list(body.get("messages"))
        if not self._thinking_on(body) or len(messages) < 2:
            return None
        last, turn = messages[-1], messages[-2]
        if last.get("role") != "user" or not any(b.get("type") == "tool_result" for b in _content(last)):
            return None  # not in a tool loop: a new user turn needs no thinking before it
        blocks = _content(turn)
        found = str(blocks[0].get("type")) if blocks else "nothing"
        if found in ("thinking", "redacted_thinking"):
            return None
        return f"messages.{len(messages) - 2}.content.0.type: " + THINKING_FIRST.format(found=found)
