"""Provider errors through real runs: Temporal (not the SDK) retries, final errors fail at once.

Every retry is asserted from the workflow history (the model activity's attempt number
and the failure Temporal recorded before it), so a retry made inside the SDK could not
pass these tests: the fake server also counts one request per attempt.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from anthropic_replies import message
from fake_server import FakeProvider, Reply
from openai_replies import completion
from provider_helpers import KEY, QUICK, history_text, model_attempts
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy

from towline import Agent
from towline.activities.providers._common import LOCAL_PLACEHOLDER_KEY, Endpoint, shown_url
from towline.client import run, start_run
from towline.errors import RunError
from towline.testing import towline_worker


@pytest.fixture
def fake(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    """`openai:` and `anthropic:` models of the worker point at the fake server."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return provider


def openai_error(message: str, code: str | None = None, kind: str = "invalid_request_error") -> dict[str, object]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_error(kind: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": message}}


async def test_429_waits_for_retry_after_and_is_retried_by_temporal(client: Client, fake: FakeProvider) -> None:
    fake.script(
        Reply(openai_error("Rate limit reached for gpt-4.1-mini", "rate_limit_exceeded", "requests"),
              status=429, headers={"retry-after": "2"}),
        Reply(completion("after the wait")),
    )
    agent = Agent(name="prov-err-429", model="openai:gpt-4.1-mini", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue)
        result = await handle.result()

    assert result.output == "after the wait"
    assert len(fake.requests) == 2  # one per Temporal attempt: the SDK retried nothing
    attempts = model_attempts(list((await handle.fetch_history()).events))
    assert [a["attempt"] for a in attempts] == [2]
    assert attempts[0]["last_failure_type"] == "HTTP429"
    assert "Rate limit reached" in attempts[0]["last_failure"]
    assert attempts[0]["next_retry_delay"] == timedelta(seconds=2)  # Retry-After, not the policy's 0.1 s
    assert fake.requests[1].at - fake.requests[0].at >= 2.0


async def test_retry_after_ms_is_honoured(client: Client, fake: FakeProvider) -> None:
    fake.script(Reply(openai_error("slow down"), status=429, headers={"retry-after-ms": "1500"}),
               Reply(completion("ok")))
    agent = Agent(name="prov-err-429ms", model="openai:gpt-4.1-mini", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue)
        await handle.result()
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    assert attempt["next_retry_delay"] == timedelta(milliseconds=1500)


@pytest.mark.parametrize("status", [500, 503, 408, 409])
async def test_server_errors_are_retried_by_temporal(client: Client, fake: FakeProvider, status: int) -> None:
    fake.script(Reply(openai_error("The server had an error"), status=status),
               Reply(openai_error("The server had an error"), status=status),
               Reply(completion("third time")))
    agent = Agent(name=f"prov-err-{status}", model="openai:gpt-4.1-mini", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue)
        result = await handle.result()
    assert result.output == "third time"
    assert len(fake.requests) == 3
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    assert (attempt["attempt"], attempt["last_failure_type"]) == (3, f"HTTP{status}")


async def test_anthropic_529_overloaded_is_retried_by_temporal(client: Client, fake: FakeProvider) -> None:
    fake.script(Reply(anthropic_error("overloaded_error", "Overloaded"), status=529),
               Reply(message([{"type": "text", "text": "here now"}])))
    agent = Agent(name="prov-err-529", model="anthropic:claude-sonnet-4-6", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue)
        result = await handle.result()
    assert result.output == "here now"
    assert len(fake.requests) == 2
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    assert (attempt["attempt"], attempt["last_failure_type"]) == (2, "HTTP529")
    assert "Overloaded" in attempt["last_failure"]


async def test_retries_exhausted_fail_the_run(client: Client, fake: FakeProvider) -> None:
    fake.script(*[Reply(openai_error("down"), status=502)] * 2)
    agent = Agent(name="prov-err-exhausted", model="openai:gpt-4.1-mini",
                  model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100),
                                                 maximum_attempts=2))
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert len(fake.requests) == 2


@pytest.mark.parametrize(("status", "body", "expected"), [
    (400, openai_error("Invalid value for 'temperature'", "invalid_value"), "Invalid value for 'temperature'"),
    (401, openai_error(f"Incorrect API key provided: {KEY}.", "invalid_api_key"), "Incorrect API key provided"),
    (404, openai_error("The model `gpt-9` does not exist", "model_not_found"), "does not exist"),
])
async def test_other_4xx_fail_the_run_at_once(
    client: Client, fake: FakeProvider, status: int, body: dict[str, object], expected: str
) -> None:
    fake.script(Reply(body, status=status))
    agent = Agent(name=f"prov-err-{status}-final", model="openai:gpt-4.1-mini", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert expected in info.value.message and f"HTTP {status}" in info.value.message
    assert KEY not in info.value.message  # the provider echoed the key: it is scrubbed
    assert len(fake.requests) == 1  # failed at once: never retried


async def test_anthropic_400_carries_the_provider_message(client: Client, fake: FakeProvider) -> None:
    fake.script(Reply(anthropic_error("invalid_request_error", "messages: roles must alternate"), status=400))
    agent = Agent(name="prov-err-anthropic-400", model="anthropic:claude-sonnet-4-6", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert "roles must alternate" in info.value.message
    assert len(fake.requests) == 1


@pytest.mark.parametrize(("model", "status", "body"), [
    ("openai:gpt-4.1-mini", 400, openai_error(
        "This model's maximum context length is 1047576 tokens. However, your messages resulted "
        "in 1200000 tokens.", "context_length_exceeded")),
    ("anthropic:claude-sonnet-4-6", 400, anthropic_error(
        "invalid_request_error", "prompt is too long: 1200000 tokens > 1000000 maximum")),
])
async def test_context_overflow_is_its_own_reason(
    client: Client, fake: FakeProvider, model: str, status: int, body: dict[str, object]
) -> None:
    fake.script(Reply(body, status=status))
    agent = Agent(name=f"prov-err-overflow-{model.split(':')[0]}", model=model, model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "a very long prompt", task_queue=queue)
    assert info.value.reason == "ContextLengthExceeded"
    assert len(fake.requests) == 1


@pytest.mark.parametrize(("model", "url_env", "key_env", "path"), [
    ("openai:gpt-4.1-mini", "OPENAI_BASE_URL", "OPENAI_API_KEY", "/v1"),
    ("anthropic:claude-sonnet-4-6", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", ""),
    ("ollama:llama3.2", "OLLAMA_BASE_URL", "OPENAI_API_KEY", "/v1"),
], ids=["openai", "anthropic", "ollama"])
async def test_an_unreachable_endpoint_is_retried_and_named_with_its_variable_not_its_key(
    client: Client, monkeypatch: pytest.MonkeyPatch, model: str, url_env: str, key_env: str,
    path: str,
) -> None:
    from ports import free_port

    port = free_port()  # nothing listens there
    monkeypatch.setenv(url_env, f"http://127.0.0.1:{port}{path}")
    monkeypatch.setenv(key_env, KEY)
    provider = model.split(":")[0]
    agent = Agent(name=f"prov-err-unreachable-{provider}", model=model,
                  model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100),
                                                 maximum_attempts=2))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue)
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue, id=f"{handle.id}-again")
        # the first run's last attempt is recorded when it ends, which may be after the second's
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert info.value.reason == "ModelRequestFailed"
    # where it went and where that came from, and why: a typo or a server not started shows
    sdk = "anthropic" if provider == "anthropic" else "openai"  # ollama speaks OpenAI's API
    assert (f"{sdk}: the endpoint http://127.0.0.1:{port}{path} ({url_env}) could not be "
            "reached (APIConnectionError: ") in info.value.message, info.value.message
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    assert (attempt["attempt"], attempt["last_failure_type"]) == (2, "ModelConnectionError")
    assert KEY not in await history_text(handle)
    assert KEY not in info.value.message


async def test_a_local_endpoint_needs_no_api_key(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")  # 127.0.0.1: this machine
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider.script(Reply(completion("hello from a keyless server")))
    agent = Agent(name="prov-err-keyless", model="openai:qwen", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "hi", task_queue=queue)
    assert result.output == "hello from a keyless server"
    [request] = provider.requests
    assert request.headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


async def test_a_remote_endpoint_without_a_key_says_which_variable_and_the_local_case(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://models.example.com/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = Agent(name="prov-err-no-key", model="openai:gpt-4.1-mini", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert ("model 'openai:gpt-4.1-mini' needs an API key: set OPENAI_API_KEY on the worker "
            "(or pass api_key=) (a local base URL, e.g. OPENAI_BASE_URL=http://localhost:8080/v1, "
            "needs none)") in info.value.message


def test_the_shown_url_keeps_no_credential() -> None:
    assert shown_url("https://user:secret@host.example:8443/v1?api-key=abc#x") == \
        "https://host.example:8443/v1"
    assert shown_url("http://[::1]:8080/v1") == "http://[::1]:8080/v1"
    endpoint = Endpoint(None, KEY, url_env="OPENAI_BASE_URL")
    assert endpoint.where("https://api.openai.com") == \
        "https://api.openai.com (the SDK's default; set OPENAI_BASE_URL to use another)"


async def test_a_missing_sdk_names_the_extra(
    client: Client, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if `towline[anthropic]` were not installed
    agent = Agent(name="prov-err-no-sdk", model="anthropic:claude-sonnet-4-6", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert "pip install 'towline[anthropic]'" in info.value.message
    assert fake.requests == []
