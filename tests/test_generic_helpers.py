"""`towline.testing.run_*` helpers: hooks applied to plain values, with no enforcement.

They compose hooks in list order (classes and configured instances, sync and
async), keep whatever the hooks return (including writes to counter-named keys
of a plain dict), invent no runtime fields, repair nothing, and let exceptions
through as they are. The invariants of actual runs do not apply here.
"""

# The capabilities below take plain dicts on purpose, unlike the hooks' declared types.
# pyright: reportIncompatibleMethodOverride=false

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from towline import Capability, Middleware
from towline.testing import (
    arun_before_model_request,
    arun_before_tool_execute,
    run_after_model_request,
    run_after_tool_execute,
    run_before_model_request,
    run_before_tool_execute,
)


class Window(Capability):
    """Keeps the last two messages in what is sent (a class, sync hooks)."""

    def before_model_request(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "request_messages": state["messages"][-2:],
                "trace": [*state.get("trace", []), "Window"]}

    def after_model_request(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "trace": [*state.get("trace", []), "Window"]}


@dataclass(frozen=True)
class Redact(Capability):
    """Replaces a word (a configured instance, async hooks)."""

    word: str = "secret"

    async def before_model_request(self, state: dict[str, Any]) -> dict[str, Any]:
        sent = [m.replace(self.word, "***") for m in state["request_messages"]]
        return {**state, "request_messages": sent, "trace": [*state["trace"], f"Redact({self.word})"]}

    async def after_model_request(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "trace": [*state["trace"], f"Redact({self.word})"]}

    async def before_tool_execute(self, ctx: Any, call: dict[str, Any]) -> dict[str, Any]:
        args = {k: str(v).replace(self.word, "***") for k, v in call["args"].items()}
        return {**call, "args": args}

    async def after_tool_execute(self, ctx: Any, call: Any, result: Any) -> None:
        ctx["log"].append(("Redact", call["name"], result))


class Bump(Capability):
    """Writes counter-named keys: on a plain dict nothing restores them."""

    def before_model_request(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "run_step": 99, "tool_retries": {}}

    def before_tool_execute(self, ctx: Any, call: dict[str, Any]) -> dict[str, Any]:
        return {**call, "id": "changed"}

    def after_tool_execute(self, ctx: Any, call: Any, result: Any) -> None:
        ctx["log"].append(("Bump", call["name"], result))


class Nothing(Capability):
    """Overrides no hook."""


class Returns(Capability):
    """Returns None from every model hook."""

    def before_model_request(self, state: Any) -> Any:
        return None


class Raises(Capability):
    """Raises from a model hook."""

    def after_model_request(self, state: Any) -> Any:
        raise KeyError("boom")


IGNORED = Middleware("mw", before_model=lambda state: {"never": True})
"""Middleware hooks are not capability hooks; the helpers skip them."""


def test_before_model_request_composes_in_order_on_a_plain_dict() -> None:
    value = {"messages": ["a", "b secret", "c"], "request_messages": [], "trace": []}
    result = run_before_model_request([Window, Nothing, Redact(word="secret"), IGNORED],
                                            value)
    assert result == {
        "messages": ["a", "b secret", "c"],
        "request_messages": ["b ***", "c"],
        "trace": ["Window", "Redact(secret)"],
    }
    assert value["request_messages"] == []  # the input itself was not changed


def test_order_follows_the_list() -> None:
    value = {"messages": ["x"], "request_messages": ["x"], "trace": []}
    result = run_after_model_request([Redact(word="q"), Window, Redact(word="z")], value)
    assert result["trace"] == ["Redact(q)", "Window", "Redact(z)"]


def test_no_runtime_fields_are_invented_or_restored() -> None:
    plain = {"messages": []}
    assert run_before_model_request([Nothing, IGNORED], plain) == {"messages": []}
    result = run_before_model_request([Bump], {"run_step": 1, "tool_retries": {"t": 1}})
    assert result == {"run_step": 99, "tool_retries": {}}


def test_invalid_results_are_passed_on_not_repaired() -> None:
    assert run_before_model_request([Returns], {"messages": []}) is None
    with pytest.raises(KeyError, match="boom"):
        run_after_model_request([Raises], {"messages": []})


def test_tool_hooks_on_plain_values() -> None:
    ctx: dict[str, Any] = {"log": []}
    call = {"id": "c1", "name": "send", "args": {"body": "my secret"}}
    result = run_before_tool_execute([Redact(), Bump], ctx, call)
    assert result == {"id": "changed", "name": "send", "args": {"body": "my ***"}}
    assert call["id"] == "c1"

    assert run_after_tool_execute([Bump, Nothing, Redact()], ctx, result, "ok") is None
    assert ctx["log"] == [("Bump", "send", "ok"), ("Redact", "send", "ok")]


class Sleeps(Capability):
    """An async hook that needs a running event loop."""

    async def before_model_request(self, state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {**state, "slept": True}


def test_a_hook_needing_the_event_loop_points_to_the_async_twin() -> None:
    with pytest.raises(TypeError, match="arun_before_model_request"):
        run_before_model_request([Sleeps], {"messages": []})


async def test_async_twins_run_hooks_that_need_the_event_loop() -> None:
    result = await arun_before_model_request([Window, Sleeps], {"messages": ["a"], "trace": []})
    assert result == {"messages": ["a"], "request_messages": ["a"], "trace": ["Window"], "slept": True}
    call = {"id": "c1", "name": "send", "args": {"body": "a secret"}}
    assert (await arun_before_tool_execute([Redact()], {}, call))["args"] == {"body": "a ***"}
