"""`examples/vision.py --model anthropic:...` as the README runs it, against a local server
enforcing the Messages API: the image and the PDF reach Claude as `image` and `document`
blocks, the output type's strict schema as its response format, and the JSON answer comes
back as the typed `Reading`."""

from __future__ import annotations

import base64

import pytest
from anthropic_rules import AnthropicRules
from fake_server import FakeProvider
from readme import cli_env, readme

from examples.vision import Attachment, Reading, sample_pdf, sample_png

pytestmark = pytest.mark.timeout(180)

ANSWER = Reading(attachments=[
    Attachment(media_type="image/png", description="A bar chart with three bars: red, blue, green."),
    Attachment(media_type="application/pdf", description="Invoice 17 from Otter Supplies Ltd."),
], answer="A chart and an invoice; the invoice's total is 42.00 EUR.")


async def test_the_example_on_claude(provider: FakeProvider, target: str, namespace: str) -> None:
    rules = AnthropicRules()
    provider.rules.append(rules)
    provider.script(rules.answer([{"type": "text", "text": ANSWER.model_dump_json()}]))
    env = cli_env(target, namespace, {"ANTHROPIC_BASE_URL": provider.url})
    done = await readme(
        "ANTHROPIC_API_KEY=sk-ant-... python examples/vision.py --model anthropic:claude-sonnet-4-6",
        env=env, timeout=120)
    assert done.code == 0, done.err
    assert Reading.model_validate_json(done.out) == ANSWER

    assert not provider.refusals()
    [body] = provider.bodies()
    assert body["model"] == "claude-sonnet-4-6"
    blocks = body["messages"][0]["content"]
    assert blocks[0]["type"] == "text" and "invoice's total" in blocks[0]["text"]
    image, document = blocks[1], blocks[2]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == sample_png()
    assert document["type"] == "document" and document["source"]["media_type"] == "application/pdf"
    assert base64.b64decode(document["source"]["data"]) == sample_pdf()
    schema = body["output_config"]["format"]
    assert schema["type"] == "json_schema" and schema["schema"]["additionalProperties"] is False
    assert "tools" not in body  # no output tool in the native mode
