"""Credentials and endpoints stay on the worker: never in a workflow's input, history, memo,
a log line, an error message or `towline show` output."""

from __future__ import annotations

import logging

import pytest
from fake_server import FakeProvider, Reply
from openai_replies import completion, tool_call
from provider_helpers import KEY, QUICK, add, history_text, towline_show
from temporalio.client import Client

from towline import Agent
from towline.client import run, start_run
from towline.errors import RunError
from towline.testing import towline_worker


async def test_the_key_and_endpoint_appear_nowhere(
    client: Client, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, target: str, namespace: str,
) -> None:
    endpoint = f"127.0.0.1:{provider.port}"
    monkeypatch.setenv("OPENAI_BASE_URL", f"{provider.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    provider.script(
        Reply(completion(calls=[tool_call("c1", "add", {"a": 1, "b": 2})])),
        Reply(completion("3")),
        # the provider echoes the key back in an error, as a real 401 can
        Reply({"error": {"message": f"Incorrect API key provided: {KEY} at {provider.url}",
                         "type": "invalid_request_error", "code": "invalid_api_key"}}, status=401),
    )
    agent = Agent(name="prov-secrets", model="openai:gpt-4.1-mini", tools=[add], model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        ok = await start_run(tc, agent, "1 + 2?", task_queue=queue)
        assert (await ok.result()).output == "3"
        with pytest.raises(RunError) as failure:
            await run(tc, agent, "again", task_queue=queue, id=f"{ok.id}-401")
        failed = tc.get_workflow_handle(f"{ok.id}-401")

    assert provider.requests and all(r.headers["authorization"] == f"Bearer {KEY}" for r in provider.requests)
    # errors: the provider's message is kept, the key and the endpoint are not
    assert "Incorrect API key provided" in failure.value.message
    assert KEY not in failure.value.message and endpoint not in failure.value.message
    # histories (input, every event, every payload decoded, memo upserts included)
    for handle in (ok, failed):
        text = await history_text(handle)
        assert "Incorrect API key" in text or "3" in text  # the search reads payloads
        assert KEY not in text and endpoint not in text
        description = await handle.describe()
        assert KEY not in str(description.raw_description)
    # log lines, at DEBUG, of towline, Temporal, the SDK and its HTTP library
    assert "HTTP Request" in caplog.text  # the HTTP library logged each request...
    assert KEY not in caplog.text and endpoint not in caplog.text  # ...with the endpoint redacted
    # `towline show`
    for handle in (ok, failed):
        _, out, err = await towline_show(handle.id, target, namespace)
        assert KEY not in out + err and endpoint not in out + err
        assert handle.id in out
