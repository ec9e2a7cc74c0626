"""`RedactPII`: keep personal data and secrets away from the model (or stop the run).

Detects emails, phone numbers, credit-card numbers (Luhn-checked), IPv4/IPv6
addresses, IBANs (mod-97-checked) and API-key-looking secrets (see `_pii`), and
replaces each finding (`redact`, `mask`, `hash`) or fails the run with
`ContentBlocked` (`block`).

Where it applies (`apply_to`):

- `"input"`: user prompts (and runtime retry prompts) in what is sent to the
  model, a projection through `request_messages`: the canonical history keeps
  the user's words as given.
- `"output"`: the text of every model response, in `after_model_request`,
  before the response is committed: the canonical history holds the redacted
  text. Tool-call arguments are left alone (a tool that sends an email needs
  the address); they reach the model again only as its own earlier calls.
  Earlier responses' text in the request is redacted too (e.g. a seeded history).
- `"tool_results"`: tool return contents, in the request projection. The
  canonical history keeps the confirmed results as the tools returned them (the
  durable record); the model only ever sees them redacted. With `block`, a
  result is also checked in `after_tool_execute`, so the run fails right after
  the tool, with its result recorded, before any model sees it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from towline.errors import ConfigurationError, ContentBlocked
from towline.messages import (
    Message,
    ModelResponse,
    RetryPart,
    TextPart,
    ToolReturnPart,
    UserPart,
    as_media,
)
from towline.tools import ToolCall, ToolContext, ToolReturn

from ._pii import PII_KINDS, PIIKind, PIIMatch, find_pii, iban_valid, luhn_valid, replacement
from .base import Capability
from .state import ModelRequestState

__all__ = [
    "RedactPII",
    "RedactStrategy",
    "RedactTarget",
    "PIIKind",
    "PII_KINDS",
    "PIIMatch",
    "find_pii",
    "luhn_valid",
    "iban_valid",
    "redact_text",
]

RedactStrategy = Literal["redact", "mask", "hash", "block"]
RedactTarget = Literal["input", "output", "tool_results"]
_TARGETS: tuple[RedactTarget, ...] = get_args(RedactTarget)
_STRATEGIES: tuple[RedactStrategy, ...] = get_args(RedactStrategy)


def redact_text(
    text: str, kinds: Iterable[PIIKind] = PII_KINDS,
    strategy: Literal["redact", "mask", "hash"] = "redact",
) -> str:
    """`text` with every finding of `kinds` replaced according to `strategy`."""
    out: list[str] = []
    last = 0
    for m in find_pii(text, kinds):
        out.append(text[last:m.start])
        out.append(replacement(m.kind, m.value, strategy))
        last = m.end
    out.append(text[last:])
    return "".join(out)


def _as_frozenset(value: Any, allowed: tuple[str, ...], what: str) -> frozenset[Any]:
    items: list[Any] = [value] if isinstance(value, str) else list(value)
    unknown = sorted(str(i) for i in items if i not in allowed)
    if unknown:
        raise ConfigurationError(f"RedactPII: unknown {what} {unknown}; choose from {allowed}")
    if not items:
        raise ConfigurationError(f"RedactPII: {what} must not be empty")
    return frozenset(items)


@dataclass(frozen=True)
class RedactPII(Capability):
    """Redact (or block) PII and secrets on input, model output and tool results."""

    kinds: Collection[PIIKind] = field(default_factory=lambda: frozenset(PII_KINDS))
    """What to detect (stored as a frozenset): `email`, `phone`, `credit_card`, `ip_address`,
    `iban`, `api_key`."""
    strategy: RedactStrategy = "redact"
    """`redact` (`[REDACTED_EMAIL]`), `mask` (`**** **** **** 1111`, `j***@example.com`),
    `hash` (`[EMAIL:<first 12 hex of sha256 of the normalised value>]`, deterministic, so
    equal values stay recognisably equal) or `block` (fail the run with `ContentBlocked`)."""
    apply_to: Collection[RedactTarget] = field(default_factory=lambda: frozenset(_TARGETS))
    """Where (stored as a frozenset): `input` (user prompts), `output` (model text),
    `tool_results`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", _as_frozenset(self.kinds, PII_KINDS, "kinds"))
        object.__setattr__(self, "apply_to", _as_frozenset(self.apply_to, _TARGETS, "apply_to"))
        if self.strategy not in _STRATEGIES:
            raise ConfigurationError(
                f"RedactPII: unknown strategy {self.strategy!r}; choose from {_STRATEGIES}"
            )

    # --- hooks ---------------------------------------------------------------------------

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        """Project `request_messages` with input, earlier output and tool results redacted."""
        messages = [self._message(m) for m in state.request_messages]
        if all(a is b for a, b in zip(messages, state.request_messages, strict=True)):
            return state
        return state.model_copy(update={"request_messages": messages})

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        """Redact the response's text before it is admitted and committed."""
        if "output" not in self.apply_to or state.response is None:
            return state
        response = self._message(state.response)
        if response is state.response:
            return state
        return state.model_copy(update={"response": response})

    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: ToolReturn) -> None:
        """With `block`: fail the run as soon as a tool returns PII (its result is recorded)."""
        if self.strategy == "block" and "tool_results" in self.apply_to:
            self._value(result.content, f"the result of tool {call.tool_name!r}")

    # --- transforms ----------------------------------------------------------------------

    def _message(self, message: Message) -> Any:
        if isinstance(message, ModelResponse):
            if "output" not in self.apply_to:
                return message
            parts: list[Any] = [
                p.model_copy(update={"content": self._text(p.content, "the model's output")})
                if isinstance(p, TextPart) else p
                for p in message.parts
            ]
        else:
            parts = [self._request_part(p) for p in message.parts]
        if all(a is b for a, b in zip(parts, message.parts, strict=True)):
            return message
        return message.model_copy(update={"parts": parts})

    def _request_part(self, part: Any) -> Any:
        if isinstance(part, UserPart) and "input" in self.apply_to:
            content = self._value(part.content, "the user's input")  # text, or text and media
        elif isinstance(part, ToolReturnPart) and "tool_results" in self.apply_to:
            content = self._value(part.content, f"the result of tool {part.tool_name!r}")
        elif isinstance(part, RetryPart):
            target: RedactTarget = "tool_results" if part.tool_name else "input"
            if target not in self.apply_to:
                return part
            content = self._text(part.content, "a retry prompt")
        else:
            return part
        return part if content is part.content else part.model_copy(update={"content": content})

    def _text(self, text: str, where: str) -> str:
        if self.strategy == "block":
            found = find_pii(text, self.kinds)
            if found:
                kinds = ", ".join(sorted({m.kind for m in found}))
                raise ContentBlocked(f"RedactPII blocked the run: {kinds} found in {where}")
            return text
        redacted = redact_text(text, self.kinds, self.strategy)
        return text if redacted == text else redacted

    def _value(self, value: Any, where: str) -> Any:
        """Redact every string inside a JSON-like value (dict keys are left as they are)."""
        if isinstance(value, str):
            return self._text(value, where)
        if as_media(value) is not None:  # an image or a document: its bytes are not text
            return value
        if isinstance(value, dict):
            items = cast(dict[Any, Any], value)
            new = {k: self._value(v, where) for k, v in items.items()}
            return items if all(new[k] is items[k] for k in items) else new
        if isinstance(value, list | tuple):
            seq: list[Any] = list(cast(Iterable[Any], value))
            out = [self._value(v, where) for v in seq]
            return cast(Any, value) if all(a is b for a, b in zip(out, seq, strict=True)) else out
        return value
