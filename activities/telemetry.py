"""Activity-side telemetry: a `chat` span per model call, an `execute_tool` span per tool call.

`ActivityTelemetry` is a worker interceptor (`TowlinePlugin` installs it): around
each `towline.model_request` and `towline.tool.<name>` activity it opens a span
with the OpenTelemetry GenAI semantic-convention attributes and records
towline's activity metrics through `activity.metric_meter()`, so they land on
the worker's Temporal metrics endpoint. When `temporalio.contrib.opentelemetry`
is on the client, these spans are children of its `RunActivity` span, in the
run's trace. Prompts, completions, tool arguments and results go on the spans
only when `TOWLINE_OTEL_CAPTURE_CONTENT=1` was set when the plugin was built.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolReturnPart,
    TextPart,
    ThinkingPart,
    Usage,
)
from towline.models import Model
from towline.options import ModelSettings

from .io import ModelActivityInput, ToolActivityInput, ToolActivityResult

__all__ = [
    "CAPTURE_ENV",
    "METRICS",
    "ActivityTelemetry",
    "capture_content_from_env",
    "provider_name",
    "note_request_messages",
    "genai_messages",
]

try:  # towline[otel]; without it, spans are no-ops
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised only without the extra
    _trace = None

CAPTURE_ENV = "TOWLINE_OTEL_CAPTURE_CONTENT"
"""Set to 1 on a worker to put prompts, completions, tool arguments and results on spans."""

METRICS: Mapping[str, str] = {
    "towline_model_requests": "counter {agent, model, status}: model calls (each activity "
                              "attempt; status ok or error)",
    "towline_model_tokens": "counter {agent, model, type}: tokens of model calls (type input "
                            "or output)",
    "towline_model_cost_micros": "counter {agent, model}: spend of model calls in millionths of "
                                 "a US dollar (when the provider reports a cost)",
}
"""Activity-side metrics and their labels."""

_PROVIDERS = {
    "openai": "openai", "openai-responses": "openai", "anthropic": "anthropic",
    "ollama": "ollama", "google": "gcp.gemini", "google-vertex": "gcp.vertex_ai",
    "azure": "azure.ai.openai", "bedrock": "aws.bedrock",
}
"""`gen_ai.system` (OpenTelemetry's GenAI names) of each provider prefix."""
_capture: contextvars.ContextVar[bool] = contextvars.ContextVar("towline_capture", default=False)


def capture_content_from_env() -> bool:
    """Whether `TOWLINE_OTEL_CAPTURE_CONTENT` asks for content on spans (read on the worker)."""
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def provider_name(model_name: str, model: Model | None) -> str:
    """`gen_ai.system` for a model: the provider prefix of its name, or what the model says.

    A model class may name its provider with a `provider` (or `system`) attribute;
    towline's offline models are `towline.test` and `towline.function`.
    """
    prefix, sep, _ = model_name.partition(":")
    if sep and prefix in _PROVIDERS:
        return _PROVIDERS[prefix]
    for attr in ("provider", "system"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    kind = type(model).__name__ if model is not None else ""
    if kind in ("TestModel", "FunctionModel") or model_name == "test" or prefix == "function":
        return "towline.function" if kind == "FunctionModel" or prefix == "function" else "towline.test"
    return kind.lower() or "unknown"


def _request_model(model_name: str) -> str:
    prefix, sep, rest = model_name.partition(":")
    return rest if sep and prefix in _PROVIDERS else model_name


def _cost_micros(usage: Usage) -> int | None:
    """The spend a provider reported for a call, when `Usage` carries one.

    The hook for the providers' cost accounting: `Usage.cost_micros` (int, millionths
    of a US dollar) once it exists; None until then or when the cost is unknown.
    """
    value: Any = getattr(usage, "cost_micros", None)
    return value if isinstance(value, int) else None


def genai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the GenAI conventions' shape (`gen_ai.input.messages` / `output.messages`)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ModelResponse):
            parts: list[dict[str, Any]] = []
            for p in m.parts:
                if isinstance(p, TextPart):
                    parts.append({"type": "text", "content": p.content})
                elif isinstance(p, ThinkingPart):
                    parts.append({"type": "reasoning", "content": p.content})
                elif isinstance(p, NativeToolReturnPart):  # the provider ran it: its result
                    parts.append({"type": "tool_call_response", "id": p.tool_call_id,
                                  "response": p.content})
                else:
                    parts.append({"type": "tool_call", "id": p.tool_call_id, "name": p.tool_name,
                                  "arguments": p.args})
            entry: dict[str, Any] = {"role": "assistant", "parts": parts}
            if m.finish_reason:
                entry["finish_reason"] = m.finish_reason
            out.append(entry)
            continue
        assert isinstance(m, ModelRequest)
        for p in m.parts:
            if p.part_kind == "system":
                out.append({"role": "system", "parts": [{"type": "text", "content": p.content}]})
            elif p.part_kind == "user":
                out.append({"role": "user", "parts": [{"type": "text", "content": p.content}]})
            elif p.part_kind == "tool_return":
                out.append({"role": "tool", "parts": [{
                    "type": "tool_call_response", "id": p.tool_call_id, "response": p.content}]})
            else:
                out.append({"role": "user", "parts": [{"type": "text", "content": p.content}]})
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def note_request_messages(messages: Sequence[Message], settings: ModelSettings | None = None) -> None:
    """Put the full request (resolved from references) on the current `chat` span: its
    settings, and its messages if content is captured."""
    if _trace is None:
        return
    span = _trace.get_current_span()
    for name in ("temperature", "max_tokens", "top_p"):
        value = getattr(settings, name, None)
        if value is not None:
            span.set_attribute(f"gen_ai.request.{name}", value)
    if _capture.get():
        span.set_attribute("gen_ai.input.messages", _json(genai_messages(messages)))


@contextlib.contextmanager
def _span(name: str, kind: Any, attributes: dict[str, Any]) -> Generator[Any]:
    if _trace is None:
        yield None
        return
    with _trace.get_tracer("towline").start_as_current_span(name, kind=kind, attributes=attributes) as s:
        try:
            yield s
        except BaseException as e:
            s.set_attribute("error.type", type(e).__name__)
            raise


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, owner: ActivityTelemetry) -> None:
        super().__init__(next)
        self._owner = owner

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        arg: Any = input.args[0] if len(input.args) == 1 else None
        if isinstance(arg, ModelActivityInput):  # towline.model_request
            return await self._model(input, arg)
        if isinstance(arg, ToolActivityInput):  # towline.tool.<name>
            return await self._tool(input, arg)
        return await super().execute_activity(input)

    async def _model(self, input: ExecuteActivityInput, req: ModelActivityInput) -> Any:
        model = self._owner.models.get(req.model)
        system = provider_name(req.model, model)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.system": system,
            "gen_ai.provider.name": system, "gen_ai.request.model": _request_model(req.model),
            "gen_ai.agent.name": req.agent, "towline.run_step": req.run_step,
        }
        labels = {"agent": req.agent, "model": req.model}
        meter = activity.metric_meter()
        token = _capture.set(self._owner.capture_content)
        try:
            # the full request (messages may come by reference) is noted by the activity
            with _span(f"chat {attrs['gen_ai.request.model']}", _client_kind(), attrs) as span:
                try:
                    response: Any = await super().execute_activity(input)
                except BaseException:
                    meter.create_counter("towline_model_requests", METRICS["towline_model_requests"]
                                         ).add(1, {**labels, "status": "error"})
                    raise
                meter.create_counter("towline_model_requests", METRICS["towline_model_requests"]
                                     ).add(1, {**labels, "status": "ok"})
                if isinstance(response, ModelResponse):
                    self._model_done(span, meter, labels, response)
                return response
        finally:
            _capture.reset(token)

    def _model_done(self, span: Any, meter: Any, labels: dict[str, str], response: ModelResponse) -> None:
        usage = response.usage
        tokens = meter.create_counter("towline_model_tokens", METRICS["towline_model_tokens"])
        tokens.add(usage.input_tokens, {**labels, "type": "input"})
        tokens.add(usage.output_tokens, {**labels, "type": "output"})
        cost = _cost_micros(usage)
        if cost is not None:
            meter.create_counter("towline_model_cost_micros", METRICS["towline_model_cost_micros"]
                                 ).add(cost, labels)
        if span is None:
            return
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if cost is not None:
            span.set_attribute("towline.cost_micros", cost)
        if response.model_name:
            span.set_attribute("gen_ai.response.model", response.model_name)
        if response.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        if response.id:
            span.set_attribute("gen_ai.response.id", response.id)
        if self._owner.capture_content:
            span.set_attribute("gen_ai.output.messages", _json(genai_messages([response])))

    async def _tool(self, input: ExecuteActivityInput, inp: ToolActivityInput) -> Any:
        info = activity.info()
        ctx = inp.context(info.activity_type.removeprefix("towline.tool."), info.workflow_id or "")
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": ctx.tool_name,
            "gen_ai.tool.call.id": ctx.tool_call_id, "gen_ai.tool.type": "function",
            "gen_ai.agent.name": ctx.agent, "towline.run_step": ctx.run_step,
        }
        if self._owner.capture_content:
            attrs["gen_ai.tool.call.arguments"] = _json(inp.args)
        with _span(f"execute_tool {ctx.tool_name}", _internal_kind(), attrs) as span:
            result: Any = await super().execute_activity(input)
            if span is not None and isinstance(result, ToolActivityResult):
                span.set_attribute("towline.tool.status", result.status)
                if self._owner.capture_content:
                    span.set_attribute("gen_ai.tool.call.result", _json(result.content))
            return result


def _client_kind() -> Any:
    return _trace.SpanKind.CLIENT if _trace is not None else None


def _internal_kind() -> Any:
    return _trace.SpanKind.INTERNAL if _trace is not None else None


class ActivityTelemetry(Interceptor):
    """Worker interceptor: GenAI spans and metrics around towline's model and tool activities."""

    def __init__(self, models: Mapping[str, Model], *, capture_content: bool | None = None) -> None:
        self.models = dict(models)
        self.capture_content = capture_content_from_env() if capture_content is None else capture_content

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap towline's activities (others pass through untouched)."""
        return _Inbound(next, self)
