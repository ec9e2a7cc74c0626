"""What `towline rerun` reports: where today's agent first departs from a recorded run.

Requests are compared as the model would see them, less what differs between any two
runs: message ids (drawn from each run's own randomness) and tool call ids (numbered by
first appearance instead). A message the recording only holds by reference matches any
message. A difference is shown as a short unified diff, one line per message part.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from towline.messages import Message
from towline.replay.records import RecordedOutcome, Sent, short
from towline.results import Counters
from towline.runtime.request_chain import RequestDefinitions

__all__ = ["Divergence", "RerunReport", "request_differences", "LEDGER_FIELDS", "DIFF_LINES"]

DIFF_LINES = 24
"""Lines of a messages diff shown (the rest is counted)."""
LEDGER_FIELDS = ("run_step", "requests", "tool_calls", "input_tokens", "output_tokens",
                 "cost_micros", "output_retries_used", "tool_retries")
"""The ledger counters shown side by side (and compared)."""
_UNKNOWN = "<a message the recording holds only by reference>"

DivergenceKind = Literal["request", "tool", "output", "ledger"]


@dataclass(frozen=True)
class Divergence:
    """One place where today's run departs from the recording."""

    kind: DivergenceKind
    """`request` (a model request), `tool` (a tool call), `output`, or `ledger`."""
    step: int
    """The run step it happens at (0 for the run's end)."""
    summary: str
    """What differs, in one line."""
    diff: list[str] = field(default_factory=list[str])
    """A short diff (recorded `-`, today `+`)."""

    def to_json(self) -> dict[str, Any]:
        """Its JSON form."""
        return {"kind": self.kind, "step": self.step, "summary": self.summary, "diff": self.diff}


def _normal(message: Sent, ids: dict[str, str]) -> list[str]:
    """A message as lines, one per part, without ids (tool call ids renumbered)."""
    if isinstance(message, str):
        return [_UNKNOWN]
    data = message.model_dump(mode="json")
    lines: list[str] = []
    for part in cast(list[dict[str, Any]], data.get("parts", [])):
        part = dict(part)
        call_id = part.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            part["tool_call_id"] = ids.setdefault(call_id, f"call#{len(ids) + 1}")
        kind = part.pop("part_kind", "?")
        lines.append(f"{data['kind']} {kind}: {json.dumps(part, sort_keys=True, ensure_ascii=False, default=str)}")
    if data["kind"] == "response":
        usage = data.get("usage")
        lines.append(f"response usage: {json.dumps(usage, sort_keys=True)}")
    return lines or [f"{data['kind']} (empty)"]


def normal_messages(messages: Sequence[Sent]) -> list[list[str]]:
    """Every message normalised (see `_normal`), tool call ids numbered across the request."""
    ids: dict[str, str] = {}
    return [_normal(m, ids) for m in messages]


def _same_messages(was: list[list[str]], now: list[list[str]]) -> bool:
    if len(was) != len(now):
        return False
    return all(a == b or a == [_UNKNOWN] for a, b in zip(was, now, strict=True))


def _lines(messages: list[list[str]]) -> list[str]:
    return [f"[{i}] {short(line, 200)}" for i, parts in enumerate(messages) for line in parts]


def _tools_line(was: RequestDefinitions, now: RequestDefinitions) -> str | None:
    before = {t.name: t for t in [*was.tools, *was.output_tools]}
    after = {t.name: t for t in [*now.tools, *now.output_tools]}
    notes: list[str] = []
    if gone := sorted(set(before) - set(after)):
        notes.append("no longer offered: " + ", ".join(gone))
    if added := sorted(set(after) - set(before)):
        notes.append("newly offered: " + ", ".join(added))
    changed = sorted(n for n in set(before) & set(after)
                     if before[n].model_dump(mode="json") != after[n].model_dump(mode="json"))
    if changed:
        notes.append("definition changed: " + ", ".join(changed))
    return "tools " + "; ".join(notes) if notes else None


def _settings_line(was: RequestDefinitions, now: RequestDefinitions) -> str | None:
    a = was.settings.model_dump(mode="json", exclude_defaults=True)
    b = now.settings.model_dump(mode="json", exclude_defaults=True)
    extra_a = (was.output_mode, was.output_schema)
    extra_b = (now.output_mode, now.output_schema)
    if a == b and extra_a == extra_b:
        return None
    return f"settings {short(a, 60)} -> {short(b, 60)}" if a != b else "output mode or schema changed"


def request_differences(
    recorded_model: str, recorded_messages: Sequence[Sent], recorded_defs: RequestDefinitions | None,
    unknown_prefix: bool, model: str, messages: Sequence[Message], defs: RequestDefinitions,
) -> tuple[list[str], list[str]]:
    """What differs between a recorded request and today's: one-line notes and a diff."""
    notes: list[str] = []
    if recorded_model and recorded_model != model:
        notes.append(f"model {recorded_model} -> {model}")
    was = normal_messages(recorded_messages)
    now = normal_messages(messages)
    if unknown_prefix:  # only the tail the recording holds can be compared
        now = now[len(now) - len(was):] if len(was) <= len(now) else now
    diff: list[str] = []
    if not _same_messages(was, now):
        notes.append(f"messages ({len(was)} recorded, {len(now)} today)")
        lines = list(difflib.unified_diff(_lines(was), _lines(now), "recorded", "today",
                                          lineterm="", n=1))
        diff = lines[:DIFF_LINES]
        if len(lines) > DIFF_LINES:
            diff.append(f"... {len(lines) - DIFF_LINES} more diff lines")
    if recorded_defs is not None:
        for line in (_tools_line(recorded_defs, defs), _settings_line(recorded_defs, defs)):
            if line:
                notes.append(line)
    return notes, diff


def _ledger_value(counters: Counters | None, name: str) -> Any:
    if counters is None:
        return None
    value: Any = getattr(counters, name)
    return dict(cast(dict[str, int], value)) if isinstance(value, dict) else value


@dataclass(frozen=True)
class RerunReport:
    """Today's agent against a recorded run: the first divergence, and both ledgers."""

    recorded_id: str
    """The recorded run's workflow id."""
    rerun_id: str
    """The workflow id of today's run."""
    agent: str
    """Today's agent's name."""
    tools: Literal["recorded", "live"]
    """Where tool results came from."""
    divergences: list[Divergence]
    """Every difference found, first first (empty: the runs are the same)."""
    recorded: RecordedOutcome
    """How the recorded run ended."""
    today: RecordedOutcome
    """How today's run ended."""
    recorded_ledger: Counters | None
    """The recording's last ledger snapshot."""
    today_ledger: Counters | None
    """Today's run's last ledger snapshot."""
    requests: tuple[int, int] = (0, 0)
    """Model requests made: (recorded, today)."""
    tool_calls: tuple[int, int] = (0, 0)
    """Tool calls executed as activities: (recorded, today)."""
    ui_url: str | None = None
    """Today's run in the Temporal UI (when the server's UI is known)."""

    @property
    def same(self) -> bool:
        """Whether today's agent made the same requests, tool calls and output."""
        return not self.divergences

    @property
    def first(self) -> Divergence | None:
        """The first divergence (None: the same)."""
        return self.divergences[0] if self.divergences else None

    def ledger_rows(self) -> list[tuple[str, Any, Any]]:
        """(counter, recorded, today) for every compared counter."""
        return [(n, _ledger_value(self.recorded_ledger, n), _ledger_value(self.today_ledger, n))
                for n in LEDGER_FIELDS]

    def text(self) -> str:
        """The report as `towline rerun` prints it."""
        head = (f"Rerun of {self.recorded_id} with today's agent {self.agent} "
                f"(tools {self.tools}) as {self.rerun_id}")
        out = [head]
        if self.same:
            out.append(f"Same: {self.requests[1]} model requests, {self.tool_calls[1]} tool calls "
                       f"and the outcome ({self.today.line()}) match the recording.")
        else:
            first = self.divergences[0]
            where = f"step {first.step}" if first.step else "the end"
            out.append(f"DIVERGED at {where}: {first.summary}")
            out.extend(f"  {line}" for line in first.diff)
            if len(self.divergences) > 1:
                out.append(f"({len(self.divergences) - 1} more differences after it: "
                           + "; ".join(d.summary for d in self.divergences[1:4])
                           + (" ..." if len(self.divergences) > 4 else "") + ")")
            out.append(f"Recorded: {self.recorded.line()}")
            out.append(f"Today:    {self.today.line()}")
        out.append(f"{'Ledger':<20} {'recorded':>12} {'today':>12}")
        for name, was, now in self.ledger_rows():
            mark = "" if was == now else "   <- differs"
            out.append(f"  {name:<18} {_cell(was):>12} {_cell(now):>12}{mark}")
        if self.ui_url:
            out.append(f"UI: {self.ui_url}")
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        """The JSON form of `towline rerun --json`."""
        return {
            "same": self.same, "recorded_id": self.recorded_id, "rerun_id": self.rerun_id,
            "agent": self.agent, "tools": self.tools,
            "first": self.first.to_json() if self.first else None,
            "divergences": [d.to_json() for d in self.divergences],
            "recorded": self.recorded.to_json(), "today": self.today.to_json(),
            "requests": {"recorded": self.requests[0], "today": self.requests[1]},
            "tool_calls": {"recorded": self.tool_calls[0], "today": self.tool_calls[1]},
            "ledger": {n: {"recorded": a, "today": b} for n, a, b in self.ledger_rows()},
            "ui_url": self.ui_url,
        }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(cast(dict[str, Any], value).items())) or "{}"
    return str(value)
