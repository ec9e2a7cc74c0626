"""Rendering for the `towline` command: tables, times, money, calls and conversations.

Pure formatting of values the reading modules (`towline.cli.listing`,
`towline.cli.runstate`) gathered; nothing here talks to a server, so what a
command prints can change without touching how run state is read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

from towline.events import RunEvent, preview, thinking_text
from towline.messages import (
    Message,
    ModelRequest,
    NativeToolCallPart,
    NativeToolReturnPart,
    ThinkingPart,
    Usage,
)
from towline.results import Counters
from towline.runtime.ledger import format_cost

__all__ = [
    "terminal_text",
    "inline",
    "short",
    "content",
    "thinking_line",
    "styled",
    "dim",
    "arguments",
    "format_call",
    "native_call",
    "native_result",
    "conversation_lines",
    "counters_lines",
    "table",
    "when",
    "duration",
    "money",
    "plural",
    "done_line",
    "output_text",
    "native_lines",
    "tool_end_line",
    "waiting_line",
    "print_json",
    "print_out",
    "SESSION_ENDS",
]

SESSION_ENDS = {"request": "by request (the end signal, towline end)",
                "idle": "no message came within its idle timeout"}
"""How `towline run --session` and `towline show` word `RunResult.session_end`."""


_CONTROL = re.compile(
    "\x1b\\[2m|\x1b\\[22m|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Control characters (C0 but newline and tab, DEL, C1, bidirectional overrides), except the
two sequences `dim` writes."""


def terminal_text(text: str, *, in_json: bool = False) -> str:
    """`text` safe to write to a terminal: control characters shown escaped (`\\x1b`), so
    model or tool text cannot move the cursor, recolour, retitle or write the clipboard
    (OSC 52) of whoever reads `towline run` or `watch`; only `dim`'s own styling passes.
    `in_json`: `text` is a JSON document, escaped as JSON (`\\u009b`), so it still parses."""
    return _CONTROL.sub(_json_escaped if in_json else _escaped, text)


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    if len(char) > 1:
        return char  # `dim`'s
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ANY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""Every control character, newline and tab included, and the Unicode line separators."""
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def inline(text: str) -> str:
    """`text` for one line of a terminal: every control character shown escaped (`\\n`,
    `\\x1b`), newlines and tabs too and no styling let through, so a value someone else wrote
    (a reason, who decided) can neither start a line of its own nor drive the terminal."""
    return _ANY_CONTROL.sub(lambda found: _SHORT_ESCAPES.get(found.group()) or _escaped(found), text)


def _json_escaped(found: re.Match[str]) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in found.group())


def short(value: Any, limit: int = 120) -> str:
    """A one-line rendering of a value (JSON for non-strings), cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def content(value: Any, limit: int = 120) -> str:
    """A prompt's or a tool return's content in one line, media parts named by type and size
    (`[image/png, 5000000 bytes]`) rather than printed as bytes."""
    return short(preview(value, limit), limit)


def styled(stream: TextIO) -> bool:
    """Whether to style what goes to `stream`: a terminal, unless `NO_COLOR` is set or TERM is
    `dumb` (https://no-color.org)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False
    return tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def dim(text: str, on: bool = True) -> str:
    """`text` dimmed (ANSI faint) when `on`; as it is otherwise."""
    return f"\x1b[2m{text}\x1b[22m" if on and text else text


def thinking_line(part: ThinkingPart, limit: int = 120) -> str:
    """A thinking part in one line: its text (`thinking_text`: or `[redacted]`, `[hidden]`)
    and its signature abbreviated."""
    text = short(thinking_text([part]), limit)
    sig = part.signature
    if sig:
        text += f"  (signature {sig[:8]}…, {len(sig)} chars)" if len(sig) > 12 else f"  (signature {sig})"
    return text


def arguments(args: dict[str, Any], limit: int = 120) -> str:
    """`a=1, b=2`, cut at `limit` characters."""
    inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in args.items())
    return short(inner, limit)


def format_call(tool_name: str, args: dict[str, Any], limit: int = 120) -> str:
    """`add(a=1, b=2)`."""
    return f"{tool_name}({arguments(args, limit)})"


def native_call(part: NativeToolCallPart, limit: int = 120) -> str:
    """A native tool call in one line: `web_search(query="...")`, marked with its provider."""
    return f"{format_call(part.tool_name, part.args, limit)} ({part.provider})"


def native_result(part: NativeToolReturnPart, limit: int = 120) -> str:
    """A native tool's result in one line: its status and content (`succeeded: [...]`)."""
    return f"{part.status}: {content(part.content, limit)}"


def conversation_lines(messages: list[Message], *, full: bool = True,
                       thinking: bool = True) -> list[str]:
    """The conversation as aligned lines: who said what, tool calls and their returns, and
    (unless `thinking` is off) the model's thinking, its signature abbreviated."""
    limit = 10_000 if full else 120
    lines: list[str] = []
    for m in messages:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if p.part_kind == "system":
                    lines.append(f"  system     {short(p.content, limit)}")
                elif p.part_kind == "user":
                    lines.append(f"  user       {content(p.content, limit)}")
                elif p.part_kind == "tool_return":
                    lines.append(f"  tool       {p.tool_name} [{p.tool_call_id}] {p.status}: "
                                 f"{content(p.content, limit)}")
                else:
                    lines.append(f"  retry      {short(p.content, limit)}")
        else:
            for p in m.parts:
                if p.part_kind == "text":
                    lines.append(f"  model      {short(p.content, limit)}")
                elif p.part_kind == "thinking":
                    if thinking:
                        lines.append(f"  thinking   {thinking_line(p, limit)}")
                elif p.part_kind == "native_tool_call":
                    lines.append(f"  model      runs {native_call(p, limit)} [{p.tool_call_id}]")
                elif p.part_kind == "native_tool_return":
                    lines.append(f"  provider   {p.tool_name} [{p.tool_call_id}] "
                                 f"{native_result(p, limit)}")
                else:
                    lines.append(f"  model      calls {format_call(p.tool_name, p.args, limit)} "
                                 f"[{p.tool_call_id}]")
    return lines


def counters_lines(counters: Counters, usage: Usage | None) -> list[str]:
    """The ledger (names as in `towline.v1.RunCounters`) and the usage."""
    retries = ", ".join(f"{k}={v}" for k, v in sorted(counters.tool_retries.items())) or "none"
    lines = [
        "Counters (towline.counters):",
        f"  run_step             {counters.run_step}   (max_steps {counters.max_steps})",
        f"  tool_calls           {counters.tool_calls}",
        f"  requests             {counters.requests}",
        (f"  output_retries_used  {counters.output_retries_used}   "
         f"(output_retries {counters.output_retries})"),
        f"  tool_retries         {retries}",
        (f"  tokens               {counters.input_tokens} in, "
         f"{counters.output_tokens} out, {counters.total_tokens} total"),
        f"  cost                 {format_cost(counters.cost_micros, counters.unpriced_requests)}",
    ]
    if usage is not None:
        cached = f" ({usage.cache_read_tokens} cached)" if usage.cache_read_tokens else ""
        thought = f" ({usage.reasoning_tokens} thinking)" if usage.reasoning_tokens else ""
        lines.append(f"Usage: {usage.requests} requests, {usage.input_tokens} input tokens{cached}, "
                     f"{usage.output_tokens} output tokens{thought}")
    return lines


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)]
        return "  ".join([*padded, cells[-1]]).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def when(value: datetime | None) -> str:
    """A timestamp in local time, to the second; `-` when absent."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def duration(value: timedelta | None) -> str:
    """`<1s`, `42s`, `3m05s`, `2h07m`, `3d04h`; `-` when unknown."""
    if value is None:
        return "-"
    seconds = int(value.total_seconds())
    if seconds < 1:
        return "<1s"
    minutes, s = divmod(seconds, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    if days:
        return f"{days}d{h:02d}h"
    if hours:
        return f"{hours}h{m:02d}m"
    if minutes:
        return f"{minutes}m{s:02d}s"
    return f"{s}s"


def money(micros: int | None) -> str:
    """Millionths of a US dollar as dollars, exactly (`$0.001234`, `$1.50`); `-` when unknown."""
    if micros is None:
        return "-"
    sign = "-" if micros < 0 else ""
    dollars, rest = divmod(abs(micros), 1_000_000)
    cents = f"{rest:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${dollars}.{cents}"


def plural(n: int, noun: str) -> str:
    """`1 step`, `2 steps`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def done_line(steps: int, tool_calls: int, requests: int, tokens: int, cost: str = "") -> str:
    """What `towline run` and `watch` say of a run that succeeded (`cost`: `, cost $...`)."""
    return (f"Done: {plural(steps, 'step')}, {plural(tool_calls, 'tool call')}, "
            f"{plural(requests, 'model request')}, {plural(tokens, 'token')}{cost}.")


def output_text(value: Any) -> str:
    """A run's output (or answer) for stdout: a string as it is, anything else as indented
    JSON; terminal control escaped."""
    if isinstance(value, str):
        return terminal_text(value)
    return terminal_text(json.dumps(value, indent=2, ensure_ascii=False), in_json=True)


def native_lines(step: int, native: list[dict[str, Any]]) -> list[str]:
    """The native tool calls of a `response` event, which the provider ran itself."""
    return [f"[step {step}] model runs {format_call(str(n.get('tool')), dict(n.get('args') or {}), 80)}"
            f" ({n.get('provider')})"
            + (f" -> {n.get('status')}: {content(n.get('content'), 60)}" if n.get("status") else "")
            for n in native]


def tool_end_line(e: RunEvent) -> str:
    """A `tool_end` event: the tool, its content and its status."""
    return f"[step {e.step}]   {e.field('tool')} -> {content(e.field('content'), 80)}  ({e.field('status')})"


def print_json(value: Any) -> None:
    """Print `value` as indented JSON (non-ASCII kept, unknown types as strings)."""
    print(terminal_text(json.dumps(value, indent=2, ensure_ascii=False, default=str), in_json=True))


def print_out(as_json: bool, data: Any, text: Callable[[], str | Sequence[str]] | Sequence[str],
              empty: str | None = None) -> None:
    """What a command prints: `data` with `--json` (`print_json`); else `empty` when given and
    `data` is empty, or the text: lines, or what `text()` makes (one string, or lines)."""
    if as_json:
        print_json(data)
    elif empty is not None and not data:
        print(empty)
    else:
        shown = text() if callable(text) else text
        print(shown if isinstance(shown, str) else "\n".join(shown))


def waiting_line(workflow_id: str, kind: str, tool: str, args: dict[str, Any], call_id: str) -> str:
    """What `towline run` and `towline watch` print for a call that starts to wait: for a
    person's decision (`kind` "approval") or for a client tool's result ("client"), each with
    the command that answers it."""
    call = format_call(tool, args, 80)
    if kind == "client":
        return (f"waiting for a client's result: {call}  (call id {call_id})\n"
                f"  towline respond {workflow_id} {call_id} --result JSON")
    return (f"waiting for approval: {call}  (call id {call_id})\n"
            f"  towline approve {workflow_id} {call_id}   "
            f"or   towline reject {workflow_id} {call_id}")
