"""`Summarization`: replace old history with a model-written summary when it grows large.

Unlike the projections (`HistoryWindow`, `ContextEditing`), this rewrites the
canonical history: a `before_model` middleware hook returns
`{"messages": [RemoveAll(), summary, *kept], "llm_usage": usage}`, which the
runtime applies to the working state (so the model sees it) and persists. The
summariser's model call is an activity (`HookContext.call_model`) and its
usage is reported under `llm_usage`, so it reaches the run's usage and ledger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from towline.errors import ConfigurationError
from towline.hooks import hook_context
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RemoveAll,
    RetryPart,
    SystemPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
    media_in,
    prompt_text,
)

from ._config import check_int, check_str, check_timeout
from ._pairing import start_keeping_calls
from .base import Capability

__all__ = [
    "Summarization", "estimate_tokens", "transcript", "split_for_summary", "split_system",
]

SUMMARY_PROMPT = (
    "You compress the earlier part of a conversation between a user, an AI assistant and "
    "its tools. Write a concise summary that keeps every fact, decision, open question, "
    "tool result and user preference the assistant still needs to continue the work. "
    "Answer with the summary only."
)


@dataclass(frozen=True)
class Summarization(Capability):
    """Summarise older history in `before_model` once it exceeds a trigger.

    Keeps the last `keep` messages verbatim, plus (moving the cut earlier) the
    call of every kept tool return, so a call and its return are never split;
    everything before the cut is replaced by one summary message, except system
    parts (a seeded system prompt), which stay first, verbatim. A previous
    summary is summarised again with the rest, so the history stays bounded.
    """

    model: str
    """The summariser: a model name the worker knows (`TowlinePlugin(models=...)`)."""
    trigger_tokens: int | None = None
    """Summarise when the history's estimated tokens (characters / 4) exceed this."""
    trigger_messages: int | None = None
    """Summarise when the history has more messages than this."""
    keep: int = 10
    """How many of the most recent messages to keep verbatim (>= 1)."""
    prompt: str = SUMMARY_PROMPT
    """The summariser's system instructions."""
    summary_prefix: str = "Summary of the earlier conversation:"
    """Starts the summary message, so the model knows what it is reading."""
    timeout: timedelta = timedelta(minutes=2)
    """Start-to-close timeout of the summariser's model activity."""

    def __post_init__(self) -> None:
        check_str("Summarization", "model", self.model, empty=False)
        if self.trigger_tokens is None and self.trigger_messages is None:
            raise ConfigurationError("Summarization needs trigger_tokens or trigger_messages")
        check_int("Summarization", "keep", self.keep, 1)
        if self.trigger_tokens is not None:
            check_int("Summarization", "trigger_tokens", self.trigger_tokens, 1)
        if self.trigger_messages is not None:
            check_int("Summarization", "trigger_messages", self.trigger_messages, 1)
        check_str("Summarization", "prompt", self.prompt, empty=False)
        check_str("Summarization", "summary_prefix", self.summary_prefix)
        check_timeout("Summarization", "timeout", self.timeout, optional=False)
        if self.trigger_messages is not None and self.trigger_messages <= self.keep:
            raise ConfigurationError("Summarization.trigger_messages must be greater than keep")

    def triggered(self, messages: list[Message]) -> bool:
        """Whether `messages` exceed a trigger."""
        if self.trigger_messages is not None and len(messages) > self.trigger_messages:
            return True
        return self.trigger_tokens is not None and estimate_tokens(messages) > self.trigger_tokens

    async def before_model(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the history before the cut with a summary, when triggered."""
        messages: list[Message] = list(state["messages"])
        if not self.triggered(messages):
            return None
        older, kept = split_for_summary(messages, self.keep)
        system, older = split_system(older)
        if not older:
            return None
        hook = hook_context()
        step = hook.run.counters.run_step + 1  # the request about to be made
        request = ModelRequest(parts=[
            SystemPart(content=self.prompt),
            UserPart(content=f"Conversation to summarise:\n\n{transcript(older)}"),
        ])
        response = await hook.call_model(
            self.model, [request], run_step=step,
            summary=f"{self.model} · summarise {len(older)} messages · step {step}",
            timeout=self.timeout,
        )
        text = f"{self.summary_prefix}\n\n{response.text}"
        summary = ModelRequest(parts=[UserPart(content=text)])
        return {"messages": [RemoveAll(), *system, summary, *kept], "llm_usage": response.usage}


def split_for_summary(messages: list[Message], keep: int) -> tuple[list[Message], list[Message]]:
    """(older, kept): the last `keep` messages and every kept return's call are kept."""
    start = start_keeping_calls(messages, len(messages) - keep)
    return list(messages[:start]), list(messages[start:])


def split_system(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(system, rest): the system parts of `messages` (e.g. a seeded system prompt), which are
    kept verbatim and first, and everything else, which is summarised."""
    system: list[Message] = []
    rest: list[Message] = []
    for m in messages:
        if not isinstance(m, ModelRequest):
            rest.append(m)
            continue
        sys_parts = [p for p in m.parts if isinstance(p, SystemPart)]
        if len(sys_parts) == len(m.parts):
            system.append(m)
        elif not sys_parts:
            rest.append(m)
        else:
            system.append(m.model_copy(update={"parts": sys_parts}))
            others = [p for p in m.parts if not isinstance(p, SystemPart)]
            rest.append(m.model_copy(update={"parts": others}))
    return system, rest


def estimate_tokens(messages: list[Message]) -> int:
    """A deterministic token estimate: characters of the messages' parts as JSON, / 4."""
    chars = sum(
        len(json.dumps(m.model_dump(mode="json")["parts"], sort_keys=True)) for m in messages
    )
    return (chars + 3) // 4


def _content(value: Any) -> str:
    """A tool's return as text; media parts are named by kind, never their bytes."""
    rest, media = media_in(value)
    if media:
        shown = [*(_content(v) for v in rest), prompt_text(list(media))]
        return " ".join(s for s in shown if s)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def transcript(messages: list[Message]) -> str:
    """The messages as plain text for the summariser, one line per part."""
    lines: list[str] = []
    for m in messages:
        if isinstance(m, ModelResponse):
            for p in m.parts:
                if isinstance(p, TextPart):
                    lines.append(f"Assistant: {p.content}")
                elif isinstance(p, ToolCallPart | NativeToolCallPart):
                    lines.append(f"Assistant called {p.tool_name}({_content(p.args)})")
                elif isinstance(p, NativeToolReturnPart):
                    lines.append(f"{p.tool_name} (run by {p.provider}) returned ({p.status}): "
                                 f"{_content(p.content)}")
            continue
        for part in m.parts:
            if isinstance(part, SystemPart):
                lines.append(f"System: {part.content}")
            elif isinstance(part, UserPart):
                lines.append(f"User: {part.text}")  # media named by kind, never their bytes
            elif isinstance(part, ToolReturnPart):
                lines.append(f"Tool {part.tool_name} returned ({part.status}): "
                             f"{_content(part.content)}")
            elif isinstance(part, RetryPart):  # pyright: ignore[reportUnnecessaryIsInstance]
                lines.append(f"Retry requested: {part.content}")
    return "\n".join(lines)
