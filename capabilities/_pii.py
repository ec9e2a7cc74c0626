"""PII and secret detectors: pure, deterministic functions over text (no I/O).

Every detector is a candidate regular expression plus, where a checksum or a
structure exists, a validator that rejects look-alikes: card numbers must pass
the Luhn check, IBANs the ISO 7064 mod-97 check, IP addresses must parse.
Overlapping findings are resolved by priority (secrets, emails, IBANs, cards,
IP addresses, phone numbers), always over all kinds, so that a card number is
never half-redacted as a phone number when only phones are selected.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "PIIKind",
    "PII_KINDS",
    "PIIMatch",
    "find_pii",
    "luhn_valid",
    "iban_valid",
    "entropy",
    "replacement",
]

PIIKind = Literal["api_key", "email", "iban", "credit_card", "ip_address", "phone"]
PII_KINDS: tuple[PIIKind, ...] = ("api_key", "email", "iban", "credit_card", "ip_address", "phone")
"""Every kind, in the priority order overlaps are resolved by."""


@dataclass(frozen=True)
class PIIMatch:
    """One finding: `text[start:end]` is a value of `kind`."""

    kind: PIIKind
    """What was found."""
    start: int
    """Offset of the first character."""
    end: int
    """Offset after the last character."""
    value: str
    """The matched text."""


def luhn_valid(number: str) -> bool:
    """Whether the digits of `number` pass the Luhn checksum (separators ignored)."""
    digits = [int(c) for c in number if c.isdigit()]
    if len(digits) < 2:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """Whether `iban` (spaces ignored) has IBAN structure and passes the mod-97 check."""
    compact = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def entropy(text: str) -> float:
    """Shannon entropy of `text` in bits per character."""
    if not text:
        return 0.0
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)(?![\w])")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f.]*[0-9A-Fa-f](?![\w:])")
_PHONE = re.compile(
    r"(?<![\w+.-])"
    r"(?:\+\d{1,3}[ .-]?)?"
    r"(?:\(\d{1,4}\)[ .-]?|\d{1,4}[ .-])"
    r"(?:\d{2,4}[ .-]){0,2}\d{3,4}"
    r"(?![\w-])"
    r"|(?<![\w+])\+\d{8,15}(?!\w)"
)
_SECRET_FORMATS = re.compile(
    r"\b(?:"
    r"sk-[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic style
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r")(?![\w-])"
)
_KEYISH_TOKEN = re.compile(
    r"\b(?:sk|pk|rk|api|apikey|key|token|secret|access|auth)[_-]"
    r"(?:live_|test_|prod_)?([A-Za-z0-9_-]{20,})(?![\w-])",
    re.IGNORECASE,
)
_KEYISH_ASSIGNMENT = re.compile(
    r"\b(?:api[_-]?key|secret(?:[_-]?key)?|access[_-]?key|auth[_-]?token|token|password|passwd)"
    r"\s*[:=]\s*[\"']?([A-Za-z0-9_\-./+=]{16,})",
    re.IGNORECASE,
)
_DATE = re.compile(r"\d{1,2}[./-]\d{1,2}[./-]\d{2,4}|\d{4}[./-]\d{1,2}[./-]\d{1,2}")
_GROUPED_NUMBER = re.compile(r"\d{1,3}(?:[ .,]\d{3})+")


def _random_looking(token: str) -> bool:
    """Whether a token looks generated (a key) rather than written (an identifier, a word)."""
    separators = sum(c in "_-./+=" for c in token)
    return (
        entropy(token) >= 3.5
        and any(c.isdigit() for c in token)
        and any(c.isalpha() for c in token)
        and separators <= len(token) // 10
    )


def _secrets(text: str) -> Iterator[tuple[int, int]]:
    for m in _SECRET_FORMATS.finditer(text):
        yield m.span()
    for pattern in (_KEYISH_TOKEN, _KEYISH_ASSIGNMENT):
        for m in pattern.finditer(text):
            if _random_looking(m.group(1)):
                yield (m.start() if pattern is _KEYISH_TOKEN else m.start(1)), m.end()


def _emails(text: str) -> Iterator[tuple[int, int]]:
    for m in _EMAIL.finditer(text):
        yield m.span()


def _ibans(text: str) -> Iterator[tuple[int, int]]:
    for m in _IBAN.finditer(text):
        value, start = m.group(), m.start()
        while len(value.replace(" ", "")) >= 15:  # try shorter prefixes at group breaks
            if iban_valid(value):
                yield start, start + len(value)
                break
            if " " not in value:
                break
            value = value.rsplit(" ", 1)[0]


def _cards(text: str) -> Iterator[tuple[int, int]]:
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            yield m.span()


def _ips(text: str) -> Iterator[tuple[int, int]]:
    for m in _IPV6.finditer(text):  # first: an IPv6 address may end in an IPv4 one
        value = m.group()
        groups = [g for g in re.split(r"[:.]", value) if g]
        if len(groups) < 3 and not (len(groups) == 2 and max(map(len, groups)) >= 3):
            continue  # ::1, a::b (a C++ or Ruby scope) are not worth redacting
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            continue
        yield m.span()
    for m in _IPV4.finditer(text):
        try:
            ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        yield m.span()


def _phones(text: str) -> Iterator[tuple[int, int]]:
    for m in _PHONE.finditer(text):
        value = m.group()
        if _DATE.match(value) or _GROUPED_NUMBER.fullmatch(value):
            continue  # 15.01.2024, 2024-01-15 1030, 1 000 000: not phone numbers
        if 7 <= sum(c.isdigit() for c in value) <= 15:
            yield m.span()


_DETECTORS: dict[PIIKind, Callable[[str], Iterable[tuple[int, int]]]] = {
    "api_key": _secrets,
    "email": _emails,
    "iban": _ibans,
    "credit_card": _cards,
    "ip_address": _ips,
    "phone": _phones,
}


def find_pii(text: str, kinds: Iterable[PIIKind] = PII_KINDS) -> list[PIIMatch]:
    """The findings of `kinds` in `text`, in order, without overlaps."""
    wanted = set(kinds)
    accepted: list[PIIMatch] = []
    for kind in PII_KINDS:  # all kinds claim their spans, by priority
        for start, end in _DETECTORS[kind](text):
            if any(start < a.end and a.start < end for a in accepted):
                continue
            accepted.append(PIIMatch(kind, start, end, text[start:end]))
    return sorted((a for a in accepted if a.kind in wanted), key=lambda a: a.start)


def _normalised(kind: PIIKind, value: str) -> str:
    if kind in ("credit_card", "phone"):
        return ("+" if value.startswith("+") else "") + re.sub(r"\D", "", value)
    if kind == "iban":
        return value.replace(" ", "").upper()
    if kind in ("email", "ip_address"):
        return value.lower()
    return value


def _mask(kind: PIIKind, value: str) -> str:
    if kind == "email":
        local, _, domain = value.partition("@")
        return f"{local[:1]}{'*' * max(3, len(local) - 1)}@{domain}"
    alnum = [i for i, c in enumerate(value) if c.isalnum()]
    keep = set[int]() if kind == "ip_address" else set(alnum[-4:])
    return "".join(c if (i in keep or not c.isalnum()) else "*" for i, c in enumerate(value))


def replacement(kind: PIIKind, value: str, strategy: Literal["redact", "mask", "hash"]) -> str:
    """What replaces `value`: `[REDACTED_EMAIL]`, a mask, or `[EMAIL:<12 hex of sha256>]`."""
    label = kind.upper()
    if strategy == "redact":
        return f"[REDACTED_{label}]"
    if strategy == "mask":
        return _mask(kind, value)
    digest = hashlib.sha256(_normalised(kind, value).encode()).hexdigest()[:12]
    return f"[{label}:{digest}]"
