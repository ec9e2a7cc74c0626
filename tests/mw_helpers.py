"""Helpers shared by the middleware tests (tests/test_middleware_*.py).

Every test runs real `AgentRun` workflows on the session's dev server. Models
are `FunctionModel` scripts: they run in the activity worker, in the test's own
process, so a script records what each request received (`Recorder.seen`).
Hooks run as workflow code, also in this process (the agent object, and so its
middleware, is shared with the sandbox), so they may record into plain lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowHandle

from scripts import Seen, text
from scripts import returns as tool_returns
from towline.agent import Agent
from towline.client import run, start_run
from towline.errors import RunError
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    SystemPart,
    TextPart,
    ToolCallPart,
    UserPart,
)
from towline.models import FunctionModel, Model, ModelInfo
from towline.results import Counters, RunResult
from towline.runtime.ledger import counters_from_history
from towline.testing import towline_worker

__all__ = [
    "Recorder",
    "text",
    "calls",
    "user",
    "run_agent",
    "fail_agent",
    "run_with_handle",
    "activity_types",
    "ledger",
    "tool_returns",
    "texts_of",
    "contents",
]


def calls(*specs: tuple[str, dict[str, Any]]) -> ModelResponse:
    """A response calling each `(tool_name, args)` in order."""
    return ModelResponse(
        parts=[ToolCallPart(tool_name=name, args=args) for name, args in specs],
        finish_reason="tool_calls",
    )


def user(content: str, id: str = "") -> ModelRequest:
    """A user message (optionally with a fixed id)."""
    return ModelRequest(id=id, parts=[UserPart(content=content)])


@dataclass
class Recorder:
    """A scripted model: `answer(call_index, messages, info)` decides each response.

    `seen` records every request in the order the activity received it.
    """

    name: str
    answer: Callable[[int, list[Message], ModelInfo], ModelResponse | str]
    seen: list[Seen] = field(default_factory=list)

    def model(self, **options: Any) -> FunctionModel:
        """The `FunctionModel` (registered under `name`)."""

        def fn(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
            index = len(self.seen)
            self.seen.append(Seen(info.agent, info.run_step, list(messages), info))
            return self.answer(index, messages, info)

        return FunctionModel(fn, model_name=self.name, **options)

    @classmethod
    def script(cls, name: str, *responses: ModelResponse | str) -> Recorder:
        """Answer the n-th request with the n-th response (the last one repeats)."""
        return cls(name, lambda i, _m, _info: responses[min(i, len(responses) - 1)])


async def run_agent(
    client: Client, agent: Agent, prompt: str | None = "go", *,
    models: Mapping[str, Model] | None = None, **options: Any,
) -> tuple[RunResult, list[Any]]:
    """Run `agent` to its result on a fresh worker; returns the result and its history events."""
    async with towline_worker(client, [agent], models=models) as (tclient, queue):
        handle = await start_run(tclient, agent, prompt, task_queue=queue, **options)
        result = await handle.result()
        events = list((await handle.fetch_history()).events)
    return result, events


async def fail_agent(
    client: Client, agent: Agent, prompt: str | None = "go", *,
    models: Mapping[str, Model] | None = None, **options: Any,
) -> RunError:
    """Run `agent`, expecting it to fail; returns the `RunError`."""
    async with towline_worker(client, [agent], models=models) as (tclient, queue):
        try:
            await run(tclient, agent, prompt, task_queue=queue, **options)
        except RunError as e:
            return e
    raise AssertionError(f"agent {agent.name!r} was expected to fail but succeeded")


async def run_with_handle(
    tclient: Client, queue: str, agent: Agent, prompt: str = "go", **options: Any
) -> WorkflowHandle[Any, RunResult]:
    """Start a run on an already running worker."""
    return await start_run(tclient, agent, prompt, task_queue=queue, **options)


def activity_types(events: Sequence[Any]) -> list[str]:
    """The activity type of every scheduled activity, in order."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events if e.HasField("activity_task_scheduled_event_attributes")
    ]


def ledger(events: Sequence[Any]) -> Counters:
    """The last `towline.counters` snapshot the history records."""
    snapshots = counters_from_history(events)
    assert snapshots, "the history holds no ledger snapshot"
    return snapshots[-1]


def contents(message: Message) -> list[str]:
    """The text of each system, user or text part of a message."""
    return [
        p.text if isinstance(p, UserPart) else p.content for p in message.parts
        if isinstance(p, SystemPart | UserPart | TextPart)
    ]


def texts_of(messages: Sequence[Message]) -> list[str]:
    """Every system/user/text content in `messages`, flattened in order."""
    return [c for m in messages for c in contents(m)]
