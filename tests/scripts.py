"""Scripting helpers shared by the capability tests.

`Script` builds a `FunctionModel` whose answer to the request of run step *n* is
the *n*-th scripted response, and records what every request received. The model
runs in the activity worker, in the test's own process, so the test reads
`script.seen` directly. Hooks run in the workflow, also in this process (the
agent object, and so its capabilities, is shared with the sandbox), so hooks
record into plain module-level structures too.

Keying responses by run step (not by call order) keeps a script correct when
Temporal retries a model activity and lets several runs share one script.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.exceptions import ApplicationError

from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from towline.models import FunctionModel, ModelInfo
from towline.results import PartialRun, RunResult

__all__ = [
    "Seen",
    "Script",
    "call",
    "calls",
    "text",
    "returns",
    "statuses",
    "assert_paired",
]

Scripted = (
    ModelResponse | str
    | Callable[[list[Message], ModelInfo], ModelResponse | str | Awaitable[ModelResponse | str]]
)
"""One scripted answer: a response, a final text, or a (sync or async) function of the request."""

_names = itertools.count(1)


@dataclass(frozen=True)
class Seen:
    """What one model request received."""

    agent: str
    run_step: int
    messages: list[Message]
    info: ModelInfo

    @property
    def tool_names(self) -> list[str]:
        """Names of the function tools offered."""
        return [t.name for t in self.info.tools]


@dataclass
class Script:
    """A scripted `FunctionModel` that records every request it answers."""

    responses: Sequence[Scripted]
    """The answer for run step 1, 2, ... in order."""
    name: str = ""
    """The model name; unique by default (a worker refuses two models with one name)."""
    seen: list[Seen] = field(default_factory=list)
    """Every request received, in order."""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"script-{next(_names)}"

    @property
    def model(self) -> FunctionModel:
        """The model to give an agent (or register by `name`)."""
        return FunctionModel(self._answer, model_name=self.name)

    def for_agent(self, agent: str) -> list[Seen]:
        """The requests a given agent's runs made."""
        return [s for s in self.seen if s.agent == agent]

    def _answer(
        self, messages: list[Message], info: ModelInfo
    ) -> ModelResponse | str | Awaitable[ModelResponse | str]:
        self.seen.append(Seen(info.agent, info.run_step, list(messages), info))
        index = info.run_step - 1
        if not 0 <= index < len(self.responses):
            raise ApplicationError(
                f"script {self.name} has no response for step {info.run_step}",
                type="ScriptExhausted", non_retryable=True,
            )
        answer = self.responses[index]
        if callable(answer):
            return answer(messages, info)
        return answer


def call(tool_name: str, args: dict[str, Any] | None = None, call_id: str = "",
         **options: Any) -> ToolCallPart:
    """One tool-call part."""
    return ToolCallPart(tool_name=tool_name, args=args or {}, tool_call_id=call_id, **options)


def calls(*parts: ToolCallPart | TextPart, finish_reason: Any = "tool_calls") -> ModelResponse:
    """A response made of tool calls (and text)."""
    return ModelResponse(parts=list(parts), finish_reason=finish_reason)


def text(content: str) -> ModelResponse:
    """A final text response."""
    return ModelResponse(parts=[TextPart(content=content)], finish_reason="stop")


def returns(messages: Iterable[Message]) -> list[ToolReturnPart]:
    """Every tool return record in a history, in order."""
    return [
        p for m in messages if isinstance(m, ModelRequest)
        for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def statuses(messages: Iterable[Message]) -> dict[str, str]:
    """Each tool call id's return status."""
    return {r.tool_call_id: r.status for r in returns(messages)}


def assert_paired(run: RunResult | PartialRun | Sequence[Message]) -> None:
    """Every tool call has exactly one return record (as a multiset of ids), none orphaned."""
    messages: Sequence[Message] = run if isinstance(run, Sequence) else run.messages
    call_ids = [
        c.tool_call_id for m in messages if isinstance(m, ModelResponse) for c in m.tool_calls
    ]
    return_ids = [r.tool_call_id for r in returns(messages)]
    assert sorted(call_ids) == sorted(return_ids), (call_ids, return_ids)
