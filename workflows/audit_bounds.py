"""The bounds of a run's audit trail: every limit in one place, and the pure functions that
apply them (no I/O, no clock).

Why: the trail is written whole into memo `towline.decisions`, which is one payload of a
workflow task's commands, and kept in the `state` query and in what continue-as-new carries.
Temporal refuses a memo over 2 MB, and a refused upsert fails the workflow task on every
attempt: a run whose trail grew too large could no longer be decided, messaged or cancelled.
So:

- a text a client gives (a reason, a rejection message, who decided) is refused over its
  limit by the update's validator (`refusal`): nothing is recorded and the client is told why;
- an entry is bounded when it is recorded (`bounded`): a long value (arguments, a result,
  rules) is replaced by a marker with a preview, a long text cut with a marker; the full values
  stay in the history, in the event of the update (or activity) that carried them;
- the trail keeps its newest entries under a byte budget (`kept`), decisions and policy
  changes each under their own, so that policy changes cannot push decisions out.

Sizes are those of the JSON encoding Temporal's converter writes (compact, non-ASCII escaped
as `\\uXXXX`), so they bound the memo as it is sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MAX_REASON_CHARS", "MAX_BY_CHARS", "MAX_VALUE_BYTES", "MAX_TEXT_BYTES", "MAX_ENTRY_BYTES",
    "MAX_DECISIONS_BYTES", "MAX_POLICY_BYTES", "AUDIT_KEEP", "POLICY_KEEP", "MAX_TRAIL_BYTES",
    "TRUNCATED", "REMEMBERED_KEEP", "MAX_REMEMBERED_BYTES", "json_bytes", "refusal", "bounded",
    "kept", "remember_refusal", "remembered_kept",
]

MAX_REASON_CHARS = 16_384
"""The longest reason an update takes, in characters; the same for a rejection's `message`,
a client tool's `error` or `retry` text and a policy's deny message. A longer one is refused
(nothing is recorded)."""
MAX_BY_CHARS = 200
"""The longest `by` (who decided, as the client says) an update takes, in characters."""
MAX_VALUE_BYTES = 2_048
"""An entry's arguments, original arguments, result, rules or pattern larger than this (JSON)
are recorded as a `TRUNCATED` marker with a preview; the update's event has the whole value."""
MAX_TEXT_BYTES = 1_024
"""Any other text of an entry (tool, call id, who, ...) is cut at this many bytes (JSON)."""
MAX_ENTRY_BYTES = 24_576
"""The most one entry takes (JSON): over it, its reason and message are cut to fit."""
MAX_DECISIONS_BYTES = 262_144
"""The trail's budget for decisions (a person's, a client's, a rule's, a timeout's): the
newest that fit are kept (`decisions_total` counts them all)."""
MAX_POLICY_BYTES = 32_768
"""The trail's separate budget for the run's policy changes (`set_policy`), so that they
cannot push decisions out."""
AUDIT_KEEP = 200
"""The most decisions the trail keeps (the newest), within `MAX_DECISIONS_BYTES`."""
POLICY_KEEP = 50
"""The most policy changes the trail keeps (the newest), within `MAX_POLICY_BYTES`."""
MAX_TRAIL_BYTES = MAX_DECISIONS_BYTES + MAX_POLICY_BYTES + 64
"""The most memo `towline.decisions` takes (JSON: both budgets, the total and the brackets)."""
REMEMBERED_KEEP = 100
"""The most remembered decisions a run keeps (the newest): they are carried across
continue-as-new and shown by the `state` query."""
MAX_REMEMBERED_BYTES = 262_144
"""The budget of a run's remembered decisions (JSON): the newest that fit are kept; an older
one that no longer fits is forgotten (its calls are asked again, never decided blindly)."""
TRUNCATED = "truncated"
"""The key of the marker that stands for a value too large to record: `{"truncated": BYTES,
"preview": "the start of its JSON…"}`."""

_VALUES = ("args", "original_args", "result", "rules", "pattern")
"""An entry's keys whose values are JSON documents (cut to a marker)."""
_TEXTS = ("reason", "message")
"""An entry's long texts (cut last, to fit `MAX_ENTRY_BYTES`)."""
_PREVIEW_CHARS = 200
_CUT = "… [cut: {n} characters in all; the whole text is in the run's history]"


def json_bytes(value: Any) -> int:
    """The size of `value` as Temporal's JSON converter encodes it."""
    return len(json.dumps(value, separators=(",", ":"), default=str))


def refusal(update: str, **texts: str | None) -> str | None:
    """Why an update is refused for an over-long text (None: none is): each of `texts` is a
    reason-like text but `by`, which has its own limit."""
    for name, text in texts.items():
        limit = MAX_BY_CHARS if name == "by" else MAX_REASON_CHARS
        if text is not None and len(text) > limit:
            return (f"the {update} update's {name} is {len(text):,} characters long; at most "
                    f"{limit:,} are recorded in the run's audit trail")
    return None


def _cut_text(text: str, limit: int) -> str:
    """`text` whose JSON is at most `limit` bytes: whole, or its start and a marker."""
    if json_bytes(text) <= limit:
        return text
    tail = _CUT.format(n=f"{len(text):,}")
    room = limit - json_bytes(tail)  # the quotes are counted once, by the tail
    low, high = 0, len(text)  # the longest start whose JSON fits `room` (a bisection)
    while low < high:
        middle = (low + high + 1) // 2
        if json_bytes(text[:middle]) - 2 <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low] + tail


def _cut_value(value: Any) -> Any:
    """`value`, or (its JSON over `MAX_VALUE_BYTES`) the marker with a preview."""
    size = json_bytes(value)
    if size <= MAX_VALUE_BYTES:
        return value
    encoded = json.dumps(value, ensure_ascii=False, default=str)
    return {TRUNCATED: size, "preview": encoded[:_PREVIEW_CHARS] + "…"}


def bounded(entry: Mapping[str, Any]) -> dict[str, Any]:
    """`entry` as the trail records it: within `MAX_ENTRY_BYTES`, long values and texts cut
    (with a marker)."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key in _VALUES:
            out[key] = _cut_value(value)
        elif isinstance(value, str) and key not in _TEXTS:
            out[key] = _cut_text(value, MAX_TEXT_BYTES)
        else:
            out[key] = value
    texts = [k for k in _TEXTS if isinstance(out.get(k), str)]
    if texts and json_bytes(out) > MAX_ENTRY_BYTES:  # the room left is shared by the texts
        rest = json_bytes({k: v for k, v in out.items() if k not in texts})
        room = MAX_ENTRY_BYTES - rest - sum(len(k) + 4 for k in texts)  # "key": and a comma
        for i, key in enumerate(sorted(texts, key=lambda k: json_bytes(out[k]))):
            out[key] = _cut_text(out[key], room // (len(texts) - i))
            room -= json_bytes(out[key])
    return out


def kept(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The newest of `entries` (oldest first) that fit the trail: decisions within
    `AUDIT_KEEP` and `MAX_DECISIONS_BYTES`, policy changes within `POLICY_KEEP` and
    `MAX_POLICY_BYTES`; a class that is full keeps none of its older entries."""
    limits = {False: (AUDIT_KEEP, MAX_DECISIONS_BYTES), True: (POLICY_KEEP, MAX_POLICY_BYTES)}
    used = {False: [0, 0], True: [0, 0]}
    full = {False: False, True: False}
    out: list[dict[str, Any]] = []
    for entry in reversed(list(entries)):
        policy = entry.get("decision") == "policy"
        if full[policy]:
            continue
        count, size = used[policy]
        size += json_bytes(entry) + 1  # its comma
        if count + 1 > limits[policy][0] or size > limits[policy][1]:
            full[policy] = True
            continue
        used[policy] = [count + 1, size]
        out.append(dict(entry))
    out.reverse()
    return out


def remember_refusal(call_id: str, entry: Mapping[str, Any]) -> str | None:
    """Why a decision may not be remembered (None: it may): a remembered decision is used
    whole (its result, changed arguments and message answer later calls), so one over
    `MAX_ENTRY_BYTES` is refused rather than cut."""
    size = json_bytes(entry)
    if size <= MAX_ENTRY_BYTES:
        return None
    return (f"the decision of {call_id!r} cannot be remembered: it is {size:,} bytes (JSON) and "
            f"a remembered decision is at most {MAX_ENTRY_BYTES:,}; decide it without remember")


def remembered_kept(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The newest of a run's remembered decisions (oldest first) within `REMEMBERED_KEEP` and
    `MAX_REMEMBERED_BYTES`: one that a newer one of the same tool, pattern and scope replaces
    is dropped, and so is one over `MAX_ENTRY_BYTES`."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    size = 0
    for entry in reversed(list(entries)):
        key = json.dumps([entry.get("tool"), entry.get("pattern"), entry.get("scope")],
                         sort_keys=True, default=str)
        entry_size = json_bytes(entry)
        if key in seen or entry_size > MAX_ENTRY_BYTES:
            continue
        if len(out) + 1 > REMEMBERED_KEEP or size + entry_size + 1 > MAX_REMEMBERED_BYTES:
            break
        seen.add(key)
        size += entry_size + 1
        out.append(dict(entry))
    out.reverse()
    return out
