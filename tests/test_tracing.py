"""Tracing in real runs: Temporal's spans (contrib.opentelemetry) and towline's, one trace per run.

The process gets one replay-safe tracer provider (`configure_tracing`) with two exporters
that record only while a test here runs: the SDK's `InMemorySpanExporter` and an OTLP/HTTP
exporter posting to a receiver on loopback. The run under test has two tools called in one
step and one capability with one hook.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from obs_helpers import (
    OtlpReceiver,
    SpanRecord,
    Toggle,
    records,
    trace_of,
    traced_agent,
    tree_lines,
    wait_for,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.worker import Worker

from towline import TowlinePlugin
from towline.activities.telemetry import CAPTURE_ENV
from towline.client import run
from towline.telemetry.metrics import configure_tracing, tracing_plugin


class Exporters:
    """The in-memory exporter and the OTLP receiver, recording only inside `recording()`."""

    def __init__(self, memory: InMemorySpanExporter, toggles: list[Toggle],
                 receiver: OtlpReceiver) -> None:
        self.memory, self.toggles, self.receiver = memory, toggles, receiver

    def start(self) -> None:
        self.memory.clear()
        self.receiver.spans.clear()
        for t in self.toggles:
            t.on = True

    def stop(self) -> None:
        for t in self.toggles:
            t.on = False


@pytest.fixture(scope="module")
def exporters() -> Iterator[Exporters]:
    memory = InMemorySpanExporter()
    with OtlpReceiver() as receiver:
        toggles = [Toggle(memory), Toggle(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces"))]
        configure_tracing(exporter=toggles[0], batch=False)
        # batched, as in production: an OTLP export does I/O, never in the workflow's thread
        configure_tracing(exporter=toggles[1])
        yield Exporters(memory, toggles, receiver)
        for t in toggles:
            t.on = False


async def traced_run(target: str, namespace: str, exporters: Exporters, name: str,
                     **worker_options: Any) -> list[SpanRecord]:
    """Run the two-tool agent with tracing on; returns the spans of its trace."""
    agent = traced_agent(name)
    client = await Client.connect(target, namespace=namespace,
                                  plugins=[tracing_plugin(), TowlinePlugin([agent])])
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    exporters.start()
    try:
        async with Worker(client, task_queue=queue, **worker_options):
            result = await run(client, agent.name, "What are 2+3 and 6*7?", task_queue=queue)
        assert result.output == "The results are [5, 42]."
        wait_for(lambda: any(s.name == "RunWorkflow:AgentRun" for s in records(
            exporters.memory.get_finished_spans())), "the workflow span")
        spans = trace_of(records(exporters.memory.get_finished_spans()), "StartWorkflow:AgentRun")
        wait_for(lambda: len([s for s in exporters.receiver.snapshot()
                              if s.trace_id == spans[0].trace_id]) >= len(spans),
                 "the OTLP receiver got the whole trace")
    finally:
        exporters.stop()
    return spans


EXPECTED_TREE = [  # siblings by name
    "StartWorkflow:AgentRun",
    "  RunWorkflow:AgentRun",
    "    StartActivity:towline.search_attributes",
    "      RunActivity:towline.search_attributes",
    "    invoke_agent {agent}",
    "      turn 1",
    "        StartActivity:towline.model_request",
    "          RunActivity:towline.model_request",
    "            chat {agent}-model",
    "        StartActivity:towline.tool.add",
    "          RunActivity:towline.tool.add",
    "            execute_tool add",
    "        StartActivity:towline.tool.multiply",
    "          RunActivity:towline.tool.multiply",
    "            execute_tool multiply",
    "        hook Audit.before_model_request",
    "      turn 2",
    "        StartActivity:towline.model_request",
    "          RunActivity:towline.model_request",
    "            chat {agent}-model",
    "        hook Audit.before_model_request",
]


def by_name(spans: list[SpanRecord], name: str) -> list[SpanRecord]:
    return [s for s in spans if s.name == name]


async def test_one_trace_per_run_with_genai_attributes(
    target: str, namespace: str, exporters: Exporters, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    name = f"traced-{uuid.uuid4().hex[:6]}"
    spans = await traced_run(target, namespace, exporters, name)
    expected = [line.format(agent=name) for line in EXPECTED_TREE]
    assert tree_lines(spans) == expected, "\n".join(tree_lines(spans))
    assert len({s.trace_id for s in spans}) == 1

    chats = by_name(spans, f"chat {name}-model")
    assert [c.attributes["towline.run_step"] for c in chats] == [1, 2]
    first = chats[0].attributes
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.system"] == "towline.function"
    assert first["gen_ai.request.model"] == f"{name}-model"
    assert first["gen_ai.usage.input_tokens"] == 30
    assert first["gen_ai.usage.output_tokens"] == 12
    assert tuple(first["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert first["gen_ai.agent.name"] == name
    tools = {s.attributes["gen_ai.tool.name"]: s.attributes for s in spans
             if s.name.startswith("execute_tool")}
    assert tools["add"]["gen_ai.tool.call.id"] == "c-add"
    assert tools["multiply"]["gen_ai.tool.call.id"] == "c-mul"
    assert tools["add"]["gen_ai.operation.name"] == "execute_tool"
    assert tools["add"]["towline.tool.status"] == "succeeded"
    hooks = by_name(spans, "hook Audit.before_model_request")
    assert [h.attributes["towline.capability"] for h in hooks] == ["Audit", "Audit"]
    assert [h.attributes["towline.hook"] for h in hooks] == ["before_model_request"] * 2
    turns = [s.attributes["towline.run_step"] for s in spans if s.name.startswith("turn ")]
    assert turns == [1, 2]
    # content stays off spans unless the worker opts in
    everything = json.dumps([s.attributes for s in spans], default=str)
    assert "What are 2+3" not in everything
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.arg"))
                   for s in spans for k in s.attributes)

    # the OTLP/HTTP receiver got the same trace, span for span
    received = [s for s in exporters.receiver.snapshot() if s.trace_id == spans[0].trace_id]
    assert sorted((s.span_id, s.parent_id, s.name) for s in received) == sorted(
        (s.span_id, s.parent_id, s.name) for s in spans)
    assert next(s for s in received if s.name == chats[0].name).attributes[
        "gen_ai.usage.input_tokens"] == 30


async def test_replay_never_duplicates_spans(
    target: str, namespace: str, exporters: Exporters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no workflow cache, every activation replays the run from its start."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    name = f"replayed-{uuid.uuid4().hex[:6]}"
    spans = await traced_run(target, namespace, exporters, name, max_cached_workflows=0)
    expected = [line.format(agent=name) for line in EXPECTED_TREE]
    assert tree_lines(spans) == expected, "\n".join(tree_lines(spans))
    assert len({s.span_id for s in spans}) == len(spans)
    # spans of this run that ended anywhere (any trace): each exactly once
    everywhere = Counter(s.name for s in records(exporters.memory.get_finished_spans()))
    assert everywhere["hook Audit.before_model_request"] == 2
    assert everywhere["turn 1"] == everywhere["turn 2"] == 1
    assert everywhere[f"invoke_agent {name}"] == 1


async def test_content_only_when_the_worker_opts_in(
    target: str, namespace: str, exporters: Exporters, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, "1")  # read when the plugin is built, on the worker
    name = f"content-{uuid.uuid4().hex[:6]}"
    spans = await traced_run(target, namespace, exporters, name)
    chats = by_name(spans, f"chat {name}-model")
    sent = json.loads(chats[0].attributes["gen_ai.input.messages"])
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "What are 2+3 and 6*7?"}]}]
    answered = json.loads(chats[1].attributes["gen_ai.output.messages"])
    assert answered[0]["parts"] == [{"type": "text", "content": "The results are [5, 42]."}]
    second_prompt = json.loads(chats[1].attributes["gen_ai.input.messages"])
    assert [m["role"] for m in second_prompt] == ["user", "assistant", "tool", "tool"]
    tool = next(s for s in spans if s.name == "execute_tool multiply").attributes
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"a": 6, "b": 7}
    assert json.loads(tool["gen_ai.tool.call.result"]) == 42
    # workflow-side spans never carry content, opt-in or not
    for s in spans:
        if s.name.startswith(("turn", "hook", "invoke_agent")):
            assert "What are" not in json.dumps(s.attributes)
