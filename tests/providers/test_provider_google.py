"""`google:<model>` and `google-vertex:<model>` end to end: the real `google-genai` SDK against
a local server that speaks Gemini's wire format (JSON and SSE) and enforces its rules
(`gemini_server.py`), through real runs on the dev server (the pure mapping functions are
tested one by one in `test_google_wire.py`); and each of those rules refusing a request that
breaks it, as Gemini does."""

from __future__ import annotations

import sys
from typing import Any

import genai_prices
import pytest
from fake_server import FakeProvider, Recorded, Reply
from gemini_server import (
    CALL_ORDER,
    CORRUPTED_SIGNATURE,
    MISSING_SIGNATURE,
    RESPONSE_COUNT,
    GeminiWire,
    answer,
    api_error,
    call,
    decoded,
    gemini_events,
    text,
    thought,
)
from provider_helpers import KEY, QUICK, add, model_attempts
from pydantic import BaseModel
from sse import Event
from temporalio.client import Client

from scripts import returns
from towline import Agent, Capability, ModelRequestState, ModelResponse, ModelSettings
from towline.client import events, run, start_run
from towline.errors import RunError
from towline.messages import BinaryContent, DocumentUrl, Message, ThinkingPart
from towline.models import GoogleModel
from towline.testing import towline_worker

SIG_CALL = "+/+/Z2VtaW5pLXRob3VnaHQtMf77"  # both have `+` and `/`: the SDK sends bytes as url-safe
SIG_TEXT = "++//Z2VtaW5pLXRob3VnaHQtMr4="  # base64, and they must survive the round trip
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture
def gemini(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> GeminiWire:
    """`google:` models of the worker point at the fake server, which enforces Gemini's rules."""
    for name in ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
                 "GOOGLE_CLOUD_LOCATION", "GOOGLE_VERTEX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", provider.url)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    return GeminiWire(provider, KEY).install()


def test_the_fake_refuses_what_gemini_refuses(gemini: GeminiWire) -> None:
    def refusal(body: dict[str, Any], path: str = "/v1beta/models/gemini-2.5-flash:generateContent",
                key: str | None = KEY) -> tuple[int, str, str] | None:
        recorded = Recorded("POST", path, {"x-goog-api-key": key} if key else {}, body, 0.0)
        for rule in gemini.server.rules:  # as the fake applies them
            reply = rule(recorded)
            if reply is not None:
                error = reply.body["error"]
                assert error["code"] == reply.status
                return reply.status, error["status"], error["message"]
        return None

    def user(*parts: dict[str, Any]) -> dict[str, Any]:
        return {"role": "user", "parts": list(parts)}

    asked = {"role": "model", "parts": [{"functionCall": {"name": "add", "args": {}}}]}
    answered = user({"functionResponse": {"name": "add", "response": {"output": "2"}}})
    assert refusal({"contents": [user({"text": "1 + 1?"}), asked, answered]}) is None
    open_schema = {"type": "object", "additionalProperties": False}
    refused: dict[tuple[int, str, str], dict[str, Any]] = {  # each rule, on an otherwise good request
        (400, "INVALID_ARGUMENT", "contents is not specified"): {"contents": []},
        (400, "INVALID_ARGUMENT", "Please use a valid role: user, model."): {
            "contents": [{"role": "assistant", "parts": [{"text": "hi"}]}]},
        (400, "INVALID_ARGUMENT", "contents.parts must not be empty"): {"contents": [user()]},
        (400, "INVALID_ARGUMENT", "Unsupported MIME type: application/zip"): {"contents": [
            user({"inlineData": {"mimeType": "application/zip", "data": "UEs="}})]},
        (400, "INVALID_ARGUMENT", CALL_ORDER): {"contents": [asked, answered]},
        (400, "INVALID_ARGUMENT", RESPONSE_COUNT): {"contents": [
            user({"text": "1 + 1?"}), asked, user(*answered["parts"] * 2)]},
        (400, "INVALID_ARGUMENT", CORRUPTED_SIGNATURE): {"contents": [
            user({"text": "1 + 1?"}), {**asked, "parts": [{**asked["parts"][0],
                                                          "thoughtSignature": "Zm9yZ2Vk"}]}, answered]},
        (400, "INVALID_ARGUMENT", "at 'generation_config.response_schema'"): {
            "contents": [user({"text": "hi"})], "generationConfig": {"responseSchema": open_schema}},
        (400, "INVALID_ARGUMENT", "at 'tools[0].function_declarations[0].parameters'"): {
            "contents": [user({"text": "hi"})],
            "tools": [{"functionDeclarations": [{"name": "add", "parameters": open_schema}]}]},
    }
    for (status, state, message), body in refused.items():
        found = refusal(body)
        assert found is not None and found[:2] == (status, state) and message in found[2], message
    hello = {"contents": [user({"text": "hi"})]}
    assert refusal(hello, key=None) == (403, "PERMISSION_DENIED", (
        "Method doesn't allow unregistered callers (callers without established identity). Please "
        "use API Key or other form of API consumer identity to call this API."))
    found = refusal(hello, key=None, path="/v1beta1/projects/p/locations/l/publishers/google/"
                                           "models/gemini-2.5-flash:generateContent")
    assert found is not None and found[:2] == (401, "UNAUTHENTICATED")


def shape(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation without the ids towline made (they differ between two runs)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        data = m.model_dump(mode="json", exclude={"id"})
        for part in data["parts"]:
            if "tool_call_id" in part:
                part["tool_call_id"] = ""
        out.append(data)
    return out


async def test_a_tool_loop_sends_each_thought_signature_back_on_its_part(
    client: Client, gemini: GeminiWire
) -> None:
    steps = (
        answer([thought("The user wants a sum: call add."),
                call("add", {"a": 20, "b": 22}, signature=SIG_CALL)],
               prompt=52, output=18, thoughts=120),
        answer([thought("add said 42."), text("20 + 22 = 42.", signature=SIG_TEXT)],
               prompt=95, output=9, thoughts=30),
    )
    agent = Agent(name="prov-google-loop", model="google:gemini-2.5-flash", tools=[add],
                  instructions="You add numbers with the add tool.",
                  settings=ModelSettings(thinking="high"), model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        gemini.script(*steps)
        plain = await (await start_run(tc, agent, "What is 20 + 22?", task_queue=queue)).result()
        gemini.script(*steps)
        handle = await start_run(tc, agent, "What is 20 + 22?", task_queue=queue, stream=True)
        seen = [e async for e in events(handle)]
        streamed = await handle.result()

    server = gemini.server
    assert server.refusals() == []
    assert [r.path for r in server.requests] == (
        ["/v1/models/gemini-2.5-flash:generateContent"] * 2
        + ["/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"] * 2)
    assert all(r.headers["x-goog-api-key"] == KEY for r in server.requests)
    first, second = server.bodies()[:2]
    assert first["systemInstruction"]["parts"] == [{"text": "You add numbers with the add tool."}]
    assert first["generationConfig"]["thinkingConfig"] == {"include_thoughts": True,
                                                           "thinking_budget": 24576}
    [declaration] = first["tools"][0]["functionDeclarations"]
    assert (declaration["name"], declaration["parameters_json_schema"]["required"]) == ("add", ["a", "b"])
    # the second request: the call goes back with its signature, the thought as a thought
    [call_id] = [r.tool_call_id for r in returns(plain.messages)]
    user, model_turn, results = second["contents"]
    assert user == {"role": "user", "parts": [{"text": "What is 20 + 22?"}]}
    thought_part, call_part = model_turn["parts"]
    assert model_turn["role"] == "model"
    assert thought_part == {"text": "The user wants a sum: call add.", "thought": True}
    assert call_part["functionCall"] == {"name": "add", "args": {"a": 20, "b": 22}, "id": call_id}
    assert decoded(call_part["thoughtSignature"]) == decoded(SIG_CALL)
    assert results == {"role": "user", "parts": [{"functionResponse": {
        "id": call_id, "name": "add", "response": {"output": "42"}}}]}

    assert plain.output == streamed.output == "20 + 22 = 42."
    responses = [m for m in plain.messages if isinstance(m, ModelResponse)]
    assert [[type(p).__name__ for p in r.parts] for r in responses] == [
        ["ThinkingPart", "ThinkingPart", "ToolCallPart"], ["ThinkingPart", "ThinkingPart", "TextPart"]]
    assert responses[0].thinking[1] == ThinkingPart(signature=SIG_CALL, provider="google")
    assert responses[1].thinking[1] == ThinkingPart(signature=SIG_TEXT, provider="google")
    assert [(r.finish_reason, r.model_name) for r in responses] == [
        ("tool_calls", "gemini-2.5-flash"), ("stop", "gemini-2.5-flash")]
    # thinking tokens are output tokens; a custom endpoint is not priced as Google's
    usage = plain.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (147, 177, 150)
    assert usage.unpriced_requests == 2 and usage.known_cost is None

    # streamed: the same history; the thoughts arrived as thinking, the answer as text
    assert shape(streamed.messages) == shape(plain.messages)
    assert streamed.usage == plain.usage
    for step, (thinking, answer_text) in enumerate(
            [("The user wants a sum: call add.", ""), ("add said 42.", "20 + 22 = 42.")], start=1):
        assert "".join(e.field("delta") for e in seen if e.type == "thinking" and e.step == step) == thinking
        assert "".join(e.field("delta") for e in seen if e.type == "text" and e.step == step) == answer_text
    assert len([e for e in seen if e.type == "thinking"]) >= 2


class EditThinking(Capability):
    """Sends the model its history without its thinking (`drop`: without the signatures), or
    with each signature forged (`change`)."""

    def __init__(self, edit: str) -> None:
        self.edit = edit

    def _part(self, p: Any) -> list[Any]:
        if not isinstance(p, ThinkingPart):
            return [p]
        if self.edit == "drop":
            return []
        return [p.model_copy(update={"signature": "Zm9yZ2Vk" + (p.signature or "")})]

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        sent = [m.model_copy(update={"parts": [q for p in m.parts for q in self._part(p)]})
                if isinstance(m, ModelResponse) else m for m in state.request_messages]
        return state.model_copy(update={"request_messages": sent})


@pytest.mark.parametrize(("edit", "stream", "expected"), [
    ("drop", False, MISSING_SIGNATURE.format(name="add", position=2)),
    ("drop", True, MISSING_SIGNATURE.format(name="add", position=2)),
    ("change", False, CORRUPTED_SIGNATURE),
])
async def test_a_dropped_or_changed_signature_is_refused_by_gemini_and_fails_the_run(
    client: Client, gemini: GeminiWire, edit: str, stream: bool, expected: str
) -> None:
    gemini.script(answer([call("add", {"a": 1, "b": 2}, signature=SIG_CALL)]),
                  answer([text("never sent")]))
    agent = Agent(name=f"prov-google-{edit}-{stream}", model="google:gemini-3-pro-preview",
                  tools=[add], capabilities=[EditThinking(edit)], model_retry_policy=QUICK,
                  settings=ModelSettings(stream=stream))
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "1 + 2?", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert expected in info.value.message
    assert "HTTP 400" in info.value.message and "INVALID_ARGUMENT" in info.value.message
    [refused] = gemini.server.refusals()
    assert refused is gemini.server.requests[1] and len(gemini.server.requests) == 2  # not retried


class Report(BaseModel):
    """What the model read."""

    title: str
    pages: int
    note: str = "none"


async def test_images_documents_native_output_usage_and_cost(client: Client, gemini: GeminiWire) -> None:
    server = gemini.server
    gemini.script(answer([thought("A chart and a report."),
                          text('{"title": "Q3 revenue", "pages": 12, "note": null}')],
                         prompt=1200, output=40, thoughts=300, cached=1000))
    model = GoogleModel("gemini-2.5-flash", base_url=server.url, api_key=KEY,
                        price_provider="google", model_name="gemini-priced")
    agent = Agent(name="prov-google-native", model=model, output_type=Report, output_mode="native",
                  settings=ModelSettings(thinking=2048, temperature=0.2, max_tokens=900),
                  model_retry_policy=QUICK)
    prompt = ["Summarise these.", BinaryContent(data=PNG, media_type="image/png"),
              DocumentUrl(url="https://example.com/q3/report.pdf")]
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, prompt, task_queue=queue)

    assert result.output == Report(title="Q3 revenue", pages=12)  # null: the default applies
    [body] = server.bodies()
    text_part, image, document = body["contents"][0]["parts"]
    assert text_part == {"text": "Summarise these."}
    assert image["inlineData"]["mime_type"] == "image/png" and decoded(image["inlineData"]["data"]) == PNG
    assert document == {"fileData": {"file_uri": "https://example.com/q3/report.pdf",
                                     "mime_type": "application/pdf"}}
    config = body["generationConfig"]
    assert (config["temperature"], config["maxOutputTokens"]) == (0.2, 900)
    assert config["thinkingConfig"] == {"include_thoughts": True, "thinking_budget": 2048}
    assert config["responseMimeType"] == "application/json"
    schema = config["responseJsonSchema"]  # the strict schema: closed, every field required
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["note", "pages", "title"]
    assert {"type": "null"} in schema["properties"]["note"]["anyOf"]
    assert "tools" not in body  # no output tool in the native mode

    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens,
            usage.cache_read_tokens) == (1200, 340, 300, 1000)
    expected = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1200, output_tokens=340, cache_read_tokens=1000),
        "gemini-2.5-flash", provider_id="google").total_price
    assert usage.known_cost == pytest.approx(float(expected)) and usage.cost > 0


async def test_a_media_type_gemini_cannot_read_fails_before_anything_is_sent(
    client: Client, gemini: GeminiWire
) -> None:
    agent = Agent(name="prov-google-zip", model="google:gemini-2.5-flash", model_retry_policy=QUICK)
    prompt = ["Unpack this.", BinaryContent(data=b"PK\x03\x04rest", media_type="application/zip")]
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, prompt, task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert "application/zip" in info.value.message
    assert gemini.server.requests == []


async def test_a_429_waits_for_gemini_retry_delay_and_is_retried_by_temporal(
    client: Client, gemini: GeminiWire
) -> None:
    gemini.script(
        api_error(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your "
                  "plan and billing details.", [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                                 "retryDelay": "1s"}]),
        answer([text("after the wait")]))
    agent = Agent(name="prov-google-429", model="google:gemini-2.5-flash", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "hi", task_queue=queue)
        result = await handle.result()
    assert result.output == "after the wait"
    server = gemini.server
    assert len(server.requests) == 2  # one per Temporal attempt: the SDK retried nothing
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    assert (attempt["attempt"], attempt["last_failure_type"]) == (2, "HTTP429")
    assert "exceeded your current quota" in attempt["last_failure"]
    assert attempt["next_retry_delay"].total_seconds() == 1.0  # Gemini's, not the policy's 0.1 s
    assert server.requests[1].at - server.requests[0].at >= 1.0


async def test_a_broken_stream_and_an_error_chunk_mid_stream_are_retried(
    client: Client, gemini: GeminiWire
) -> None:
    body = answer([thought("Thinking it over."), text("Whole at last.")])
    [first, *_] = gemini_events(body)
    overloaded: list[Event] = [first, (None, {"error": {
        "code": 503, "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE"}})]
    gemini.script(Reply(body, cut_after=3), Reply(body, events=overloaded), Reply(body))
    agent = Agent(name="prov-google-broken-stream", model="google:gemini-2.5-flash",
                  model_retry_policy=QUICK, settings=ModelSettings(stream=True))
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "go", task_queue=queue)
        seen = [e async for e in events(handle)]
        result = await handle.result()
    assert result.output == "Whole at last." and len(gemini.server.requests) == 3
    [attempt] = model_attempts(list((await handle.fetch_history()).events))
    assert (attempt["attempt"], attempt["last_failure_type"]) == (3, "HTTP503")
    assert "The model is overloaded" in attempt["last_failure"]
    # the third attempt's thinking and text came whole
    assert "".join(e.field("delta") for e in seen
                   if e.type == "thinking" and e.field("attempt") == 3) == "Thinking it over."
    assert "".join(e.field("delta") for e in seen
                   if e.type == "text" and e.field("attempt") == 3) == "Whole at last."


@pytest.mark.parametrize(("case", "reason", "expected"), [
    ("wrong-key", "ModelRequestFailed", "API key not valid. Please pass a valid API key."),
    ("overflow", "ContextLengthExceeded", "exceeds the maximum number of tokens allowed (1048576)"),
])
async def test_other_errors_fail_the_run_at_once(
    client: Client, gemini: GeminiWire, monkeypatch: pytest.MonkeyPatch,
    case: str, reason: str, expected: str,
) -> None:
    if case == "wrong-key":
        monkeypatch.setenv("GEMINI_API_KEY", "AIzaSy-not-the-right-key-0123456789")
    else:
        gemini.script(api_error(400, "INVALID_ARGUMENT", "The input token count (1200293) exceeds "
                                "the maximum number of tokens allowed (1048576)."))
    agent = Agent(name=f"prov-google-{case}", model="google:gemini-2.5-flash", model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "a long prompt", task_queue=queue)
    assert info.value.reason == reason
    assert expected in info.value.message
    assert "AIzaSy" not in info.value.message
    assert len(gemini.server.requests) == 1  # final: never retried


async def test_vertex_ai_with_an_api_key_or_a_project_and_credentials(
    client: Client, gemini: GeminiWire, monkeypatch: pytest.MonkeyPatch
) -> None:
    import google.oauth2.credentials

    server = gemini.server
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", server.url)
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)  # express mode: no project anywhere
    project = GoogleModel("gemini-2.5-flash", vertexai=True, project="towline-test",
                          location="europe-west4", base_url=server.url, model_name="vertex-project",
                          credentials=google.oauth2.credentials.Credentials(gemini.token))
    express = Agent(name="prov-vertex-express", model="google-vertex:gemini-2.5-flash",
                    model_retry_policy=QUICK)
    adc = Agent(name="prov-vertex-project", model=project, model_retry_policy=QUICK)
    gemini.script(answer([text("from express mode")]), answer([text("from the project")]))
    async with towline_worker(client, [express, adc]) as (tc, queue):
        first = await run(tc, express, "hi", task_queue=queue)
        second = await run(tc, adc, "hi", task_queue=queue)
    assert (first.output, second.output) == ("from express mode", "from the project")
    one, two = server.requests
    assert one.path == "/v1beta1/publishers/google/models/gemini-2.5-flash:generateContent"
    assert one.headers["x-goog-api-key"] == KEY and "authorization" not in one.headers
    assert two.path == ("/v1beta1/projects/towline-test/locations/europe-west4/publishers/google/"
                        "models/gemini-2.5-flash:generateContent")
    assert two.headers["authorization"] == f"Bearer {gemini.token}"
    assert "x-goog-api-key" not in two.headers
    assert server.refusals() == []


@pytest.mark.parametrize("missing", ["sdk", "key"])
async def test_a_worker_without_the_sdk_or_a_key_says_what_is_missing(
    client: Client, gemini: GeminiWire, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    if missing == "sdk":
        monkeypatch.setitem(sys.modules, "google.genai", None)  # as if the extra were not installed
    else:
        monkeypatch.delenv("GEMINI_API_KEY")
    agent = Agent(name=f"prov-google-no-{missing}", model="google:gemini-2.5-flash",
                  model_retry_policy=QUICK)
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hi", task_queue=queue)
    assert info.value.reason == "ModelRequestFailed"
    assert ("pip install 'towline[google]'" if missing == "sdk" else "GEMINI_API_KEY") in info.value.message
    assert gemini.server.requests == []
