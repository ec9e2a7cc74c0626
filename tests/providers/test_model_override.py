"""`RunInput.model` / `towline run --model`: one run on another model, if the worker allows it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import towline
from fake_server import FakeProvider, Reply
from openai_replies import completion
from override_agents import agent
from provider_helpers import KEY
from temporalio.client import Client

from towline import ModelResponse
from towline.client import run
from towline.errors import RunError
from towline.models import FunctionModel
from towline.testing import towline_worker

HERE = Path(__file__).resolve().parent


@pytest.fixture
def openai_env(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return provider


async def test_an_allowed_model_runs_instead_of_the_agents(client: Client, openai_env: FakeProvider) -> None:
    openai_env.script(Reply(completion("from the override")))
    async with towline_worker(client, [agent], allowed_models=["openai:*"]) as (tc, queue):
        result = await run(tc, agent, "hi", task_queue=queue, model="openai:gpt-4.1-mini")
        own = await run(tc, agent, "hi", task_queue=queue)
    assert result.output == "from the override"
    assert openai_env.bodies()[0]["model"] == "gpt-4.1-mini"
    assert own.output == "offline answer"  # other runs keep the agent's model
    assert len(openai_env.requests) == 1


async def test_a_model_the_worker_does_not_allow_fails_the_run(client: Client, openai_env: FakeProvider) -> None:
    async with towline_worker(client, [agent], allowed_models=["openai:*"]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue, model="anthropic:claude-sonnet-4-6")
    assert info.value.reason == "InvalidRunInput"
    assert "anthropic:claude-sonnet-4-6" in info.value.message
    assert openai_env.requests == []


async def test_registered_models_and_the_agents_own_are_always_allowed(client: Client) -> None:
    backup = FunctionModel(lambda messages, info: "backup answer", model_name="prov-override-backup")
    async with towline_worker(client, [agent], models={"backup": backup}) as (tc, queue):
        registered = await run(tc, agent, "hi", task_queue=queue, model="backup")
        own = await run(tc, agent, "hi", task_queue=queue, model="prov-override-offline")
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue, model="openai:gpt-4.1-mini")
    assert registered.output == "backup answer"
    responses = [m for m in registered.messages if isinstance(m, ModelResponse)]
    assert responses[0].model_name == "prov-override-backup"
    assert own.output == "offline answer"
    assert info.value.reason == "InvalidRunInput"  # no pattern allows provider strings


async def test_towline_run_with_model(openai_env: FakeProvider, target: str, namespace: str) -> None:
    openai_env.script(Reply(completion("hello from gpt")))
    env = {**os.environ, "OPENAI_BASE_URL": f"{openai_env.url}/v1", "OPENAI_API_KEY": KEY}
    done = await towline("run", "override_agents:agent", "hi", "--model", "openai:gpt-4.1-mini",
                         "--address", target, "--namespace", namespace,
                         "--task-queue", "prov-override-cli", env=env, cwd=HERE, timeout=120)
    assert done.code == 0, done.err
    assert done.out.strip() == "hello from gpt"
    assert "model openai:gpt-4.1-mini" in done.err
    assert openai_env.bodies()[0]["model"] == "gpt-4.1-mini"
