"""Models: the `Model` protocol, the two offline models, and the provider models.

A model is only ever executed inside the `towline.model_request` activity. Runs
name models by string (`"test"`, a provider string such as `"openai:gpt-4.1-mini"`,
or a name registered with `TowlinePlugin(models=...)`) so that a run's input and
history stay JSON.

`OpenAIChatModel`, `OpenAIResponsesModel`, `AnthropicModel`, `AzureOpenAIModel`,
`BedrockModel`, `GoogleModel` and `GoogleVertexModel` configure a
provider explicitly; their code lives on the activity side
(`towline.activities.providers`) and imports its SDK only when it runs, so
importing them needs no extra installed.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from towline.errors import ConfigurationError
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    ResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
    UserPart,
)
from towline.runtime.escapes import contain
from towline.runtime.model_types import (
    RETRYABLE_STATUSES,
    Model,
    ModelConnectionError,
    ModelHTTPError,
    ModelInfo,
)

__all__ = [
    "Model",
    "ModelInfo",
    "TestModel",
    "FunctionModel",
    "ModelHTTPError",
    "ModelConnectionError",
    "RETRYABLE_STATUSES",
    "resolve_model",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "AnthropicModel",
    "AzureOpenAIModel",
    "BedrockModel",
    "GoogleModel",
    "GoogleVertexModel",
    "example_args",
]


def example_args(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> Any:
    """A value that is valid against a (simple) JSON schema; used by `TestModel`."""
    known: Mapping[str, Any] = defs if defs is not None else (schema.get("$defs") or {})
    if "$ref" in schema:
        return example_args(known[str(schema["$ref"]).rsplit("/", 1)[-1]], known)
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key, []) if o.get("type") != "null"]
        if options:
            return example_args(options[0], known)
    kind = schema.get("type", "object")
    if kind == "object":
        props: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", props))
        return {k: example_args(v, known) for k, v in props.items() if k in required}
    simple: dict[str, Any] = {"string": "a", "integer": 1, "number": 1.0, "boolean": False}
    if kind == "array":
        return []
    return simple.get(kind)


def _word_count(messages: list[Message]) -> int:
    return sum(len(json.dumps(m.model_dump(mode="json")["parts"]).split()) for m in messages)


@dataclass(frozen=True)
class TestModel:
    """Deterministic offline model: calls each offered tool once, then summarises the returns
    (or answers the output tool, or, in the `native` and `prompted` output modes, with JSON
    text that matches the output schema)."""

    __test__ = False  # not a pytest class

    custom_output_text: str | None = None
    """Answer with this text instead of the summary."""
    model_name: str = "test"
    """The name runs select it by."""

    @property
    def name(self) -> str:
        return self.model_name

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        since_prompt = _since_last_prompt(messages)
        returns = [
            p for m in since_prompt if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)
        ]
        usage = Usage(requests=1, input_tokens=_word_count(messages))
        called = any(isinstance(m, ModelResponse) and m.tool_calls for m in since_prompt)
        if info.tools and not called:
            calls: list[ResponsePart] = [
                ToolCallPart(
                    tool_name=t.name,
                    args=example_args(t.parameters_json_schema),
                    tool_call_id=f"test_{info.run_step}_{i}",
                )
                for i, t in enumerate(info.tools)
            ]
            return ModelResponse(
                parts=calls, usage=usage.model_copy(update={"output_tokens": len(calls)}),
                model_name=self.name, finish_reason="tool_calls",
            )
        if info.output_tools:
            out = info.output_tools[0]
            call = ToolCallPart(
                tool_name=out.name, args=example_args(out.parameters_json_schema),
                tool_call_id=f"test_{info.run_step}_out", kind="output",
            )
            return ModelResponse(parts=[call], usage=usage, model_name=self.name)
        text = self.custom_output_text
        if info.output_mode != "tool" and info.output_schema is not None:
            text = json.dumps(example_args(info.output_schema))  # native/prompted: JSON text
        if text is None:
            text = json.dumps({r.tool_name: r.content for r in returns}) if returns else "success"
        return ModelResponse(
            parts=[TextPart(content=text)],
            usage=usage.model_copy(update={"output_tokens": len(text.split())}),
            model_name=self.name, finish_reason="stop",
        )


def _since_last_prompt(messages: list[Message]) -> list[Message]:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPart) for p in m.parts):
            return messages[i:]
    return messages


StreamedPiece = str | TextPart | ThinkingPart | ToolCallPart | NativeToolCallPart | NativeToolReturnPart
"""What a streaming `FunctionModel` yields."""

ModelFunction = Callable[
    [list[Message], ModelInfo],
    "ModelResponse | str | Awaitable[ModelResponse | str] | AsyncIterator[StreamedPiece] | Iterator[StreamedPiece]",
]


@dataclass(frozen=True)
class FunctionModel:
    """A model whose every response is decided by `fn(messages, info)` (sync or async).

    `fn` returns a `ModelResponse`, or a `str` for a final text answer. A generator
    function (sync or async) streams: it yields pieces of text (`str`, or a `TextPart` with
    citations), thinking (`ThinkingPart`), tool calls (`ToolCallPart`) and native tool calls
    and returns (`NativeToolCallPart`, `NativeToolReturnPart`: what a provider's own tools
    did); the response is the thinking, the native tool parts, the text joined (its
    citations kept), then the calls. When the request streams (`ModelSettings.stream`),
    each piece of text or thinking reaches the run's live events as it is yielded.
    `info` says what the request offers: tools, the output tool, or the output mode and
    schema (`info.output_mode`, `info.output_schema`).
    """

    fn: ModelFunction
    """The function that answers."""
    model_name: str | None = None
    """Defaults to `function:<module>.<qualname>` of `fn`."""
    usage: Usage = field(default_factory=lambda: Usage(requests=1, input_tokens=10, output_tokens=5))
    """Usage reported for a response that does not carry its own."""

    @property
    def name(self) -> str:
        if self.model_name:
            return self.model_name
        return f"function:{self.fn.__module__}.{self.fn.__qualname__}"

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        try:
            result = await self._produce(messages, info)
        except BaseException as e:  # `fn` is user code: its SystemExit must not end the worker
            if (contained := contain(e)) is not None:
                raise contained from e
            raise
        if isinstance(result, str):
            return ModelResponse(
                parts=[TextPart(content=result)], usage=self.usage,
                model_name=self.name, finish_reason="stop",
            )
        if result.usage == Usage():
            result = result.model_copy(update={"usage": self.usage})
        if result.model_name is None:
            result = result.model_copy(update={"model_name": self.name})
        return result

    async def _produce(self, messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        produced: Any = self.fn(messages, info)
        if inspect.isasyncgen(produced) or inspect.isgenerator(produced):
            return await _gathered(produced)
        if inspect.isawaitable(produced):
            return await produced
        return produced


async def _gathered(pieces: Any) -> ModelResponse:
    """The response a streaming `FunctionModel` yields piece by piece (thinking, native tool
    parts, text, calls)."""
    from towline.activities.streaming import text_delta, thinking_delta

    thinking: list[ThinkingPart] = []
    native: list[ResponsePart] = []
    text: list[str] = []
    citations: list[dict[str, Any]] = []
    calls: list[ToolCallPart] = []

    def take(piece: Any) -> None:
        if isinstance(piece, str | TextPart):
            content = piece if isinstance(piece, str) else piece.content
            if isinstance(piece, TextPart):
                citations.extend(piece.citations)
            text.append(content)
            text_delta(content)
        elif isinstance(piece, ToolCallPart):
            calls.append(piece)
        elif isinstance(piece, NativeToolCallPart | NativeToolReturnPart):
            native.append(piece)
        elif isinstance(piece, ThinkingPart):
            thinking.append(piece)
            if piece.content:
                thinking_delta(piece.content)
        else:
            raise TypeError(f"a streaming FunctionModel yields str, TextPart, ThinkingPart, "
                            f"ToolCallPart or native tool parts, not {type(piece).__name__}")

    if inspect.isasyncgen(pieces):
        async for piece in pieces:
            take(piece)
    else:
        for piece in pieces:
            take(piece)
    parts: list[ResponsePart] = [*thinking, *native]
    if text:
        parts.append(TextPart(content="".join(text), citations=citations))
    parts += calls
    return ModelResponse(parts=parts, finish_reason="tool_calls" if calls else "stop")


def resolve_model(name: str, registry: Mapping[str, Model]) -> Model:
    """The model a run selected by `name`: registered on this worker first, then built-in names.

    Only those: a model name arrives in an activity's input, which any client of the
    namespace can write, so it never names code to import.
    """
    if name in registry:
        return registry[name]
    if name == "test":
        return TestModel()
    raise ConfigurationError(
        f"unknown model {name!r}: register it with TowlinePlugin(models={{...}})"
    )


# The provider models live with the activities (they do I/O) and import their SDKs lazily;
# imported last because they build on the names above.
from towline.activities.providers.anthropic import AnthropicModel
from towline.activities.providers.azure import AzureOpenAIModel
from towline.activities.providers.bedrock import BedrockModel
from towline.activities.providers.google import GoogleModel, GoogleVertexModel
from towline.activities.providers.openai_chat import OpenAIChatModel
from towline.activities.providers.openai_responses import OpenAIResponsesModel
