"""ModelFallback in real runs: the next model answers when one fails for good."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from towline import Agent
from towline.capabilities import ModelFallback
from towline.client import run
from towline.errors import ConfigurationError, RunError
from towline.messages import Message
from towline.models import FunctionModel, ModelHTTPError, ModelInfo
from towline.testing import towline_worker


def failing(name: str, status: int, calls: list[str]) -> FunctionModel:
    def fail(messages: list[Message], info: ModelInfo) -> str:
        calls.append(info.model_name)
        raise ModelHTTPError(status, f"{name} refuses")

    return FunctionModel(fail, model_name=name)


def answering(name: str, calls: list[str]) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> str:
        calls.append(info.model_name)
        return f"answer from {name}"

    return FunctionModel(answer, model_name=name)


async def test_the_next_model_answers_when_the_first_fails_non_retryably(client: Client) -> None:
    calls: list[str] = []
    agent = Agent(name="fallback-ok", model=failing("fb-primary", 400, calls),
                  capabilities=[ModelFallback("fb-broken", "fb-backup", "fb-unused")])
    models = {"fb-broken": failing("fb-broken", 401, calls),
              "fb-backup": answering("fb-backup", calls),
              "fb-unused": answering("fb-unused", calls)}
    async with towline_worker(client, [agent], models=models) as (tc, queue):
        result = await run(tc, agent, "hello", task_queue=queue)

    assert result.output == "answer from fb-backup"
    # a 4xx is not retried: each failing model was asked exactly once, in order
    assert calls == ["fb-primary", "fb-broken", "fb-backup"]
    assert result.counters.requests == 1  # one model request succeeded
    assert result.messages[-1].model_name == "fb-backup"  # type: ignore[union-attr]


async def test_the_primary_error_is_raised_when_every_model_fails(client: Client) -> None:
    calls: list[str] = []
    agent = Agent(name="fallback-all-fail", model=failing("fb2-primary", 400, calls),
                  capabilities=[ModelFallback("fb2-backup")])
    models = {"fb2-backup": failing("fb2-backup", 403, calls)}
    async with towline_worker(client, [agent], models=models) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hello", task_queue=queue)

    assert info.value.reason == "ModelRequestFailed"
    assert "fb2-primary" in info.value.message and "fb2-backup" not in info.value.message
    assert calls == ["fb2-primary", "fb2-backup"]
    assert info.value.partial is not None and info.value.partial.request_count == 0


def test_configuration_is_validated() -> None:
    with pytest.raises(ConfigurationError):
        ModelFallback()
    with pytest.raises(ConfigurationError):
        ModelFallback("a", "a")
    assert ModelFallback("a", "b").models == ("a", "b")
