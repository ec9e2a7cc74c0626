"""Claude on Bedrock, streamed: the real `anthropic` SDK's `AsyncAnthropicBedrock` against a local
server that answers `/model/<model>/invoke-with-response-stream` in AWS's binary event-stream
framing (`aws_eventstream.py`) and enforces the Messages API's rules (`anthropic_rules.py`),
through real runs on the dev server.

A thinking tool loop streams its thinking live (apart from the answer's text) and sends the
signed thinking back first; a stream cut mid-way is retried by Temporal, the retry's pieces
marked with its attempt; an exception Bedrock sends after the 200 status line is retried or
final as its status would be.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from anthropic_replies import message
from anthropic_rules import AnthropicRules
from aws_eventstream import bedrock_events
from fake_server import FakeProvider, Recorded, Reply
from provider_helpers import QUICK, add, history_text
from temporalio.client import Client
from test_provider_anthropic_frontier import AWS_SECRET, BEDROCK_MODEL, thinking_loop, use_bedrock

from towline import Agent, ModelSettings
from towline.client import events, run, start_run
from towline.errors import RunError
from towline.messages import ModelResponse, ThinkingPart
from towline.testing import towline_worker

STREAM_PATH = f"/model/{BEDROCK_MODEL}/invoke-with-response-stream"
FIRST_THOUGHT = "The user wants 20 + 22: use the tool."


@pytest.fixture
def bedrock(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeProvider, AnthropicRules]:
    """The fake server as the Bedrock endpoint (SigV4 credentials of the worker's environment),
    enforcing the Messages API."""
    use_bedrock(monkeypatch, provider.url)
    rules = AnthropicRules()
    provider.rules.append(rules)
    return provider, rules


def cut(answer: Callable[[Recorded], Reply], after: int) -> Callable[[Recorded], Reply]:
    """`answer`, its stream dropped after `after` events (a broken connection)."""
    return lambda request: dataclasses.replace(answer(request), cut_after=after, gap=0.02)


async def test_a_streamed_bedrock_tool_loop_thinks_live_survives_a_cut_and_sends_its_thinking_back(
    client: Client, bedrock: tuple[FakeProvider, AnthropicRules]
) -> None:
    server, rules = bedrock
    first, second = thinking_loop(rules)
    # step 1's first stream breaks after message_start, the block start, the ping and 3
    # thinking pieces
    server.script(cut(first, 6), first, second)
    agent = Agent(name="claude-bedrock-stream", model=f"bedrock:{BEDROCK_MODEL}", tools=[add],
                  model_retry_policy=QUICK, settings=ModelSettings(thinking="minimal", stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "What is 20 + 22?", task_queue=queue)
        seen = [e async for e in events(handle)]
        result = await handle.result()

    assert result.output == "20 + 22 = 42." and server.refusals() == []
    assert [r.path for r in server.requests] == [STREAM_PATH] * 3
    for r in server.requests:  # SigV4-signed for the region's bedrock service, the model in the path
        assert r.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIAFAKEBEDROCKTEST1/")
        assert "/eu-west-3/bedrock/aws4_request" in r.headers["authorization"]
        assert "model" not in r.body and "stream" not in r.body and r.body["anthropic_version"]
    # the retry sent step 1's request again, unchanged
    assert server.bodies()[0] == server.bodies()[1]
    sent = server.bodies()[2]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    turn = sent["messages"][1]["content"]
    assert [b["type"] for b in turn] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert turn[0] == {"type": "thinking", "thinking": FIRST_THOUGHT, "signature": rules.sign(FIRST_THOUGHT)}
    assert turn[1]["data"] == rules.redacted_data("something the safety system hid")
    # the history holds the thinking the streams gathered, signed, once per step
    thought = [p for m in result.messages if isinstance(m, ModelResponse) for p in m.parts
               if isinstance(p, ThinkingPart)]
    assert [(p.content, p.redacted, p.signature is not None) for p in thought] == [
        (FIRST_THOUGHT, False, True), ("", True, True), ("The tool said 42.", False, True)]
    assert thought[0].signature == rules.sign(FIRST_THOUGHT)
    assert result.counters.requests == 2
    # the thinking was published live, apart from the text: the cut attempt's pieces, then the
    # retry's whole thinking, each marked with its attempt
    def published(kind: str, step: int, attempt: int) -> str:
        return "".join(e.field("delta") for e in seen
                       if e.type == kind and e.step == step and e.field("attempt") == attempt)

    assert published("thinking", 1, 1) == FIRST_THOUGHT[:18]
    assert published("text", 1, 1) == ""
    assert published("thinking", 1, 2) == FIRST_THOUGHT
    assert published("text", 1, 2) == "I'll add them."
    assert published("thinking", 2, 1) == "The tool said 42."
    assert published("text", 2, 1) == "20 + 22 = 42."
    assert AWS_SECRET not in await history_text(handle)


MID_STREAM = {  # messages like Bedrock's
    "throttlingException": "Too many requests, please wait before trying again.",
    "modelStreamErrorException": "The model encountered an error while streaming the response.",
    "validationException": "Malformed input request: #: extraneous key [stream] is not "
                           "permitted, please reformat your input and try again.",
}


@pytest.mark.parametrize(("kind", "retried"), [("throttlingException", True),
                                              ("modelStreamErrorException", True),
                                              ("validationException", False)])
async def test_an_exception_bedrock_sends_mid_stream_is_retried_or_final_as_its_status(
    client: Client, bedrock: tuple[FakeProvider, AnthropicRules], kind: str, retried: bool
) -> None:
    server, _ = bedrock
    answer = message([{"type": "text", "text": "Fine now."}], model=BEDROCK_MODEL)
    broken = [*bedrock_events(answer)[:3], (":exception", (kind, MID_STREAM[kind]))]
    server.script(Reply(answer, events=broken), Reply(answer))
    agent = Agent(name=f"claude-bedrock-{kind}", model=f"bedrock:{BEDROCK_MODEL}",
                  model_retry_policy=QUICK, settings=ModelSettings(stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        if retried:
            result = await run(tc, agent, "hi", task_queue=queue)
            assert result.output == "Fine now."
        else:
            with pytest.raises(RunError) as info:
                await run(tc, agent, "hi", task_queue=queue)
            assert info.value.reason == "ModelRequestFailed"
            assert MID_STREAM[kind] in info.value.message and "HTTP 400" in info.value.message
    assert len(server.requests) == (2 if retried else 1)
