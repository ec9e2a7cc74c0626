"""`ToolSelector`: let a (small, cheap) model pick the tools relevant to a request.

Agents with many tools pay for every tool definition in every request, and
models choose worse from long lists. Before each model call, `ToolSelector`
asks its own model — one `towline.model_request` activity, so the choice is
durable and replays exactly — which tools matter for the conversation, and
narrows the request to those (plus `always_include`). Narrowing the request
also narrows what may execute: a tool the main model calls anyway is `denied`.
The selector's usage is reported to the run and lands in the ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from towline.errors import ConfigurationError, ModelRequestFailed
from towline.hooks import hook_context
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    ToolReturnPart,
    UserPart,
)
from towline.tools import ToolDefinition

from ._config import check_int, check_names
from .base import Capability, NextModelCall
from .state import ModelCallRequest

__all__ = ["ToolSelector", "parse_selection", "selection_prompt"]

SELECTOR_INSTRUCTIONS = (
    "You select tools for an AI assistant. Given the conversation's latest request and a "
    "list of available tools, answer with a JSON array of the names of the tools most "
    "relevant to the request, most relevant first, at most {max_tools} names. Answer with "
    "the JSON array only, for example [\"search\", \"fetch\"]; answer [] if none is relevant."
)


@dataclass(frozen=True)
class ToolSelector(Capability):
    """Narrows each request's tools to those a selector model picks (`wrap_model_call`).

    The selector sees the latest user message and every offered tool's name and
    description, and answers with a JSON array of names. Unknown names are
    ignored; an answer with no JSON array, or a selector call that fails for
    good, falls back to the first `max_tools` offered tools, so a selection
    problem never fails the run. When no more than `max_tools` tools (besides
    `always_include`) are offered, no selection call is made.
    """

    model: str
    """The selector model's name (`"test"`, or one registered with `TowlinePlugin(models=...)`)."""
    max_tools: int = 5
    """How many tools the selector may pick (besides `always_include`)."""
    always_include: Sequence[str] = ()
    """Tools kept in every request when offered, whatever the selector answers."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError("ToolSelector: model must be a non-empty model name")
        check_int("ToolSelector", "max_tools", self.max_tools, 1)
        names = check_names("ToolSelector", "always_include", self.always_include)
        object.__setattr__(self, "always_include", names)

    async def wrap_model_call(
        self, request: ModelCallRequest, next: NextModelCall
    ) -> ModelResponse:
        """Select tools with the selector model, then call the model with the narrowed set."""
        kept = set(self.always_include)
        candidates = [d for d in request.tools if d.name not in kept]
        if len(candidates) <= self.max_tools:
            return await next(request)
        hook = hook_context()
        chosen: list[str] | None
        try:
            response = await hook.call_model(
                self.model, selection_prompt(request.messages, candidates, self.max_tools),
                run_step=request.run_step,
                summary=f"{self.model} · tool selection · step {request.run_step}",
            )
        except ModelRequestFailed:
            chosen = None
        else:
            hook.report_usage(response.usage)
            chosen = parse_selection(response.text, [d.name for d in candidates])
        picked = set(chosen[: self.max_tools] if chosen is not None
                     else [d.name for d in candidates[: self.max_tools]])
        narrowed = [d for d in request.tools if d.name in kept or d.name in picked]
        return await next(request.model_copy(update={"tools": narrowed}))


def _latest_request(messages: Sequence[Message]) -> str:
    """The latest user message's text (the request tools are selected for)."""
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            texts = [p.text for p in m.parts if isinstance(p, UserPart)]
            if texts:
                return "\n".join(texts)
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            returns = [p for p in m.parts if isinstance(p, ToolReturnPart)]
            if returns:
                return json.dumps([r.content for r in returns], default=str)[:2000]
    return ""


def selection_prompt(
    messages: Sequence[Message], tools: Sequence[ToolDefinition], max_tools: int
) -> list[Message]:
    """The selector's request: deterministic for the same conversation and tools."""
    listing = "\n".join(
        f"- {d.name}: {' '.join(d.description.split()) or '(no description)'}" for d in tools
    )
    user = f"Request:\n{_latest_request(messages)}\n\nAvailable tools:\n{listing}"
    return [
        ModelRequest(id="tool-selector-instructions",
                     parts=[SystemPart(content=SELECTOR_INSTRUCTIONS.format(max_tools=max_tools))]),
        ModelRequest(id="tool-selector-request", parts=[UserPart(content=user)]),
    ]


_ARRAY = re.compile(r"\[[^\[\]]*\]", re.DOTALL)


def parse_selection(text: str, known: Sequence[str]) -> list[str] | None:
    """The known tool names in the selector's answer, in its order; None if unusable.

    `[]` is a valid answer (no tool is relevant); an answer without a JSON
    array, or whose array names no known tool, is unusable. Accepts a bare
    array, an array inside prose or a code fence, an object with
    a `tools` array, and entries that are `{"name": ...}` objects.
    """
    candidates: list[Any] = []
    try:
        candidates.append(json.loads(text))
    except ValueError:
        pass
    candidates.extend(_loads(m.group(0)) for m in _ARRAY.finditer(text))
    for candidate in candidates:
        value: Any = (cast(dict[str, Any], candidate).get("tools") if isinstance(candidate, dict)
                      else candidate)
        if not isinstance(value, list):
            continue
        items = cast(list[Any], value)
        names: list[str] = []
        for item in items:
            name: Any = cast(dict[str, Any], item).get("name") if isinstance(item, dict) else item
            if isinstance(name, str) and name.strip() in known and name.strip() not in names:
                names.append(name.strip())
        if names or not items:
            return names
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
