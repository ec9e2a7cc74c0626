"""The model interface every model implements: `Model`, `ModelInfo`, and the errors a model raises.

Its own module, importing only messages, options and tools, so that the provider models
(`towline.activities.providers`) can build on it while `towline.models` re-exports both
them and these names, without an import cycle between the two. Import from
`towline.models`: that is the public path.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from towline.messages import Message, ModelResponse
from towline.native_tools import NativeTool
from towline.options import ModelSettings, OutputMode
from towline.tools import ToolDefinition

__all__ = [
    "Model",
    "BackgroundModel",
    "ModelInfo",
    "ModelHTTPError",
    "ModelConnectionError",
    "RETRYABLE_STATUSES",
]


class ModelInfo(BaseModel):
    """What a model is told besides the messages."""

    model_config = ConfigDict(frozen=True)

    tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """Function tools offered in this request."""
    output_tools: list[ToolDefinition] = Field(default_factory=list[ToolDefinition])
    """The structured-output tool, when the agent has an `output_type`."""
    settings: ModelSettings = Field(default_factory=ModelSettings)
    """The request's settings."""
    output_mode: OutputMode = "tool"
    """How structured output is asked for: `tool` (the output tool in `output_tools`),
    `native` (the provider's JSON-schema response format, `output_schema`) or `prompted`
    (the schema is in the instructions; the answer is JSON text)."""
    output_schema: dict[str, Any] | None = None
    """The output's JSON schema (an object; `Agent.output_schema()`) in the `native` and
    `prompted` modes. A provider sends its strict form (`towline.runtime.output_schema.strict_schema`)
    as the response format in the `native` mode; the answer is then JSON text matching it."""
    model_name: str = ""
    """The name the run selected this model by."""
    run_step: int = 0
    """The run step this request belongs to."""
    agent: str = ""
    """The agent's name."""
    native_tools: list[NativeTool] = Field(default_factory=list[NativeTool])
    """The provider's own tools offered in this request (`Agent.native_tools`): a provider
    model maps each to its API's tool, or fails the request before sending it."""


@runtime_checkable
class Model(Protocol):
    """Anything that answers a list of messages with a `ModelResponse`."""

    @property
    def name(self) -> str:
        """The name runs use to select this model."""
        ...

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """Answer the messages. Runs inside an activity: I/O is allowed here."""
        ...


@runtime_checkable
class BackgroundModel(Protocol):
    """A model that can run a request in the provider's background (`ModelSettings.background`).

    Its `request` then only starts the response and returns it `suspended` (reason
    `background`, with the provider's `response_id`); the run polls it with `poll`, with
    durable timers in between, and `cancel`s it when the run is cancelled."""

    async def poll(self, response_id: str, info: ModelInfo) -> ModelResponse:
        """The response if it is finished, else a `suspended` one (still running). One short
        call; raises like `request` when the provider refuses (a response never created)."""
        ...

    async def cancel(self, response_id: str) -> None:
        """Ask the provider to stop the response."""
        ...


RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""HTTP statuses Temporal retries, besides every 5xx (Anthropic's 529 "overloaded" too)."""


class ModelHTTPError(Exception):
    """A provider answered with an HTTP error.

    408, 409, 429 and 5xx are retried by Temporal (after `retry_after` seconds when
    the provider said so); other 4xx fail the run at once (`ModelRequestFailed`),
    and `context_overflow` fails it with `ContextLengthExceeded`. `body` is the
    provider's error message: never put credentials or endpoints in it.
    """

    def __init__(
        self, status: int, body: str = "", retry_after: float | None = None,
        *, context_overflow: bool = False,
    ) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body
        self.retry_after = retry_after
        self.context_overflow = context_overflow

    @property
    def retryable(self) -> bool:
        """Whether Temporal should retry the request."""
        return not self.context_overflow and (self.status in RETRYABLE_STATUSES or self.status >= 500)


class ModelConnectionError(Exception):
    """The provider could not be reached (or timed out); Temporal retries the request."""
