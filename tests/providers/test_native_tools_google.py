"""Gemini's built-in tools end to end: the real `google-genai` SDK against the fake Gemini API
(`gemini_server.py`), through real runs on the dev server.

The request carries `google_search`, `url_context` and `code_execution` beside the function
declarations (Gemini 3 combines them); the answer's `executable_code` and
`code_execution_result` parts become native tool parts and go back as they came, thought
signatures included (the fake refuses a changed one); the candidate's grounding and URL
context metadata become call and return parts and citations on the text, kept in the history
and not sent (a request has no field for them). Shapes as pydantic-ai recorded them
(pydantic/pydantic-ai `tests/models/google/cassettes/test_code_execution/test_code_execution.yaml`,
`tests/models/cassettes/test_google/test_google_model_web_search_tool.yaml` and
`test_google_model_web_fetch_tool.yaml`, commit 4fda38988f2939fa6ea9cdefcf120693e10ef491).
"""

from __future__ import annotations

from typing import Any

import genai_prices
import pytest
from fake_server import FakeProvider
from gemini_server import GeminiWire, answer, call, decoded, text
from provider_helpers import KEY, QUICK, add
from temporalio.client import Client

from towline import Agent, CodeExecution, WebFetch, WebSearch
from towline.client import run
from towline.messages import ModelResponse, NativeToolCallPart, NativeToolReturnPart, TextPart
from towline.models import GoogleModel
from towline.testing import towline_worker

MODEL = GoogleModel(model="gemini-3-flash-preview", price_provider="google")
"""`google:gemini-3-flash-preview`, priced at Google's prices (the fake's URL has none)."""
SIG_CODE = "EtUBCtIBAQw51sfL+SAuQCRC96Um/I4zPfDg"
SIG_CALL = "EpYPCpMPAQw51sd1pR7C6so1EoTm/R0I"
SOURCE = "https://temporal.io/blog/1-30"


@pytest.fixture
def gemini(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> GeminiWire:
    for name in ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
                 "GOOGLE_CLOUD_LOCATION", "GOOGLE_VERTEX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", provider.url)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    return GeminiWire(provider, KEY).install()


def grounded(reply: dict[str, Any]) -> dict[str, Any]:
    """`reply` with the grounding and URL context metadata of a searched, page-reading answer."""
    candidate = reply["candidates"][0]
    candidate["groundingMetadata"] = {
        "webSearchQueries": ["temporal 1.30 release", "temporal streams"],
        "groundingChunks": [{"web": {"uri": SOURCE, "title": "temporal.io"}}],
        "groundingSupports": [{"segment": {"startIndex": 0, "endIndex": 30,
                                           "text": "Temporal 1.30 adds streams."},
                               "groundingChunkIndices": [0]}],
        "searchEntryPoint": {"renderedContent": "<div>Search</div>"}}
    candidate["urlContextMetadata"] = {"urlMetadata": [
        {"retrievedUrl": SOURCE, "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_SUCCESS"}]}
    return reply


async def test_code_goes_back_signed_and_grounding_stays_in_the_history(
    client: Client, gemini: GeminiWire
) -> None:
    code = {"executableCode": {"id": "c1", "language": "PYTHON", "code": "print(2 ** 8)"},
            "thoughtSignature": SIG_CODE}
    result_part = {"codeExecutionResult": {"id": "c1", "outcome": "OUTCOME_OK", "output": "256\n"}}
    gemini.script(answer([code, result_part, call("add", {"a": 250, "b": 6}, SIG_CALL)],
                         model="gemini-3-flash-preview"),
                  grounded(answer([text("Temporal 1.30 adds streams. 256 + 6 = 262.")],
                                  model="gemini-3-flash-preview")),
                  answer([text("Nothing else.")], model="gemini-3-flash-preview"))
    agent = Agent(name="gemini-kit", model=MODEL, tools=[add], model_retry_policy=QUICK,
                  native_tools=[WebSearch(), WebFetch(), CodeExecution()])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, f"What is new in Temporal ({SOURCE})? And 2**8 + 6?",
                           task_queue=queue)
        again = await run(tc, agent, "Anything else?", task_queue=queue, message_history=result.messages)

    assert result.output == "Temporal 1.30 adds streams. 256 + 6 = 262." and again.output == "Nothing else."
    assert gemini.server.refusals() == []
    one, two, three = gemini.server.bodies()
    tools = one["tools"]  # (the SDK sends the function declarations last)
    assert [t for t in tools if "functionDeclarations" not in t] == [
        {"googleSearch": {}}, {"urlContext": {}}, {"codeExecution": {}}]
    assert [d["name"] for t in tools for d in t.get("functionDeclarations", [])] == ["add"]
    # the code parts go back as they came, the signature on the part it came with
    turn = two["contents"][1]["parts"]
    assert [next(k for k in p if k != "thoughtSignature") for p in turn] == [
        "executableCode", "codeExecutionResult", "functionCall"]
    assert turn[0]["executableCode"] == code["executableCode"]
    assert decoded(turn[0]["thoughtSignature"]) == decoded(SIG_CODE)
    assert turn[1] == result_part and decoded(turn[2]["thoughtSignature"]) == decoded(SIG_CALL)
    # the grounded answer goes back as its text only
    assert three["contents"][3]["parts"] == [{"text": "Temporal 1.30 adds streams. 256 + 6 = 262."}]

    first, second = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [p.part_kind for p in first.parts][:2] == ["native_tool_call", "native_tool_return"]
    [(run_code, ran)] = first.native_tool_calls
    assert run_code.args == {"code": "print(2 ** 8)", "language": "PYTHON"}
    assert isinstance(ran, NativeToolReturnPart) and ran.content == {"outcome": "OUTCOME_OK", "output": "256\n"}
    searched, fetched = second.native_tool_calls
    assert (searched[0].tool_name, searched[0].args) == (
        "web_search", {"queries": ["temporal 1.30 release", "temporal streams"]})
    assert searched[1] is not None and searched[1].content == [{"title": "temporal.io", "url": SOURCE}]
    assert "grounding_metadata" in searched[1].provider_data
    assert (fetched[0].tool_name, fetched[1] and fetched[1].content) == (
        "web_fetch", [{"url": SOURCE, "status": "URL_RETRIEVAL_STATUS_SUCCESS"}])
    answer_text = next(p for p in second.parts if isinstance(p, TextPart))
    assert answer_text.citations == [{"type": "grounding_support", "text": "Temporal 1.30 adds streams.",
                                      "start_index": 0, "end_index": 30,
                                      "sources": [{"title": "temporal.io", "url": SOURCE}]}]
    assert all(p.provider == "google" for m in result.messages if isinstance(m, ModelResponse)
               for p in m.parts if isinstance(p, NativeToolCallPart))

    # Gemini 3 bills each search query: two, at genai-prices' rate; code and pages unpriced
    assert result.usage.native_tool_uses == {"code_execution": 1, "web_fetch": 1, "web_search": 2}
    price = genai_prices.calc_price(genai_prices.Usage(
        input_tokens=second.usage.input_tokens, output_tokens=second.usage.output_tokens,
        web_searches=2), "gemini-3-flash-preview", provider_id="google").total_price
    assert second.usage.cost == pytest.approx(float(price))
    assert first.usage.unpriced_requests == 1 and second.usage.unpriced_requests == 1
