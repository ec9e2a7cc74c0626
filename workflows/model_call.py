"""Durable model calls from workflow code: the run's own, and hooks' (summarisers, critics).

`call_model` schedules the `towline.model_request` activity. A hook that calls a
model reports the usage under `llm_usage` itself; the run's own calls are
counted by the runtime.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from towline.activities.io import MODEL_ACTIVITY, ModelActivityInput
from towline.activities.model_errors import CONTEXT_LENGTH
from towline.errors import (
    Cancelled,
    ContextLengthExceeded,
    ModelRequestFailed,
    PayloadTooLarge,
    runtime_failure,
)
from towline.fleet.routing import current_dispatch
from towline.messages import Message, ModelResponse, Usage
from towline.options import ModelSettings, OutputMode
from towline.runtime.request_chain import RequestBook, RequestDefinitions
from towline.tools import ToolDefinition

from .run import oversize, run_payload_limit

__all__ = ["call_model", "DEFAULT_HEARTBEAT_TIMEOUT"]

DEFAULT_HEARTBEAT_TIMEOUT = timedelta(seconds=20)
"""How long a model activity may go without a heartbeat before Temporal retries it."""

_TOO_LARGE = ("PayloadTooLarge", "PayloadsTooLarge")
"""Activity failure types of a response over the payload limit: the model activity's
own check, and the SDK's (`PayloadsTooLarge`) should a response slip past it."""


async def call_model(
    model: str,
    messages: list[Message],
    *,
    tools: list[ToolDefinition] | None = None,
    output_tools: list[ToolDefinition] | None = None,
    output_mode: OutputMode = "tool",
    output_schema: dict[str, Any] | None = None,
    settings: ModelSettings | None = None,
    run_step: int = 0,
    agent: str = "",
    summary: str | None = None,
    timeout: timedelta = timedelta(minutes=10),
    retry_policy: RetryPolicy | None = None,
    heartbeat_timeout: timedelta | None = DEFAULT_HEARTBEAT_TIMEOUT,
) -> ModelResponse:
    """Call `model` durably (one activity). Raises `ModelRequestFailed` if it fails for good
    (`ContextLengthExceeded` when the request does not fit the model's context window).

    The activity heartbeats while it waits for the provider, so a worker that dies
    mid-request is noticed after `heartbeat_timeout` and the request retried elsewhere.

    `output_mode` and `output_schema` (the output's JSON schema, in the `native` and
    `prompted` modes) reach the model in its `ModelInfo`.

    Inside an `AgentRun`, the request travels by reference (`towline.runtime.request_chain`):
    its input names the messages a worker already holds with one key, so its size
    does not grow with the conversation.
    """
    definitions = RequestDefinitions(tools=tools or [], output_tools=output_tools or [],
                                     settings=settings or ModelSettings(),
                                     output_mode=output_mode, output_schema=output_schema)
    inp = ModelActivityInput(model=model, run_step=run_step, agent=agent)
    book: RequestBook | None = getattr(workflow.instance(), "request_book", None)
    n: int | None = None
    if isinstance(book, RequestBook):
        # Refused like an inline request would be: a worker that misses the messages
        # fetches them all in one query answer, and a provider receives them all.
        chain, inline = book.open(messages, definitions)
        n = chain.n
        inp = inp.model_copy(update={"chain": chain})
        size = max(inline + oversize(definitions, 0), oversize(inp, 0))
        size = size if size > run_payload_limit() else 0
    else:
        inp = inp.model_copy(update={"messages": messages, **dict(definitions)})
        size = oversize(inp)
    if size:
        if isinstance(book, RequestBook) and n is not None:
            book.close(n)
        raise runtime_failure(
            PayloadTooLarge(f"model request of {size} bytes exceeds the {run_payload_limit()}-byte limit")
        )
    try:
        # Decoded as plain JSON and validated here: a response that does not decode
        # (say, a provider adapter's tool call whose args are a list) would otherwise
        # fail the workflow *task* and leave the run stuck, retrying forever.
        # Fleet: the model's own task queue (a shared rate limit) and the run's priority;
        # both default (the run's queue, no priority) before engine 3 (see `towline.fleet.routing`).
        dispatch = current_dispatch()
        raw: Any = await workflow.execute_activity(
            MODEL_ACTIVITY, inp,
            start_to_close_timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
            retry_policy=retry_policy or RetryPolicy(maximum_attempts=5),
            summary=summary or f"{model} · step {run_step}",
            task_queue=dispatch.model_queue(model), priority=dispatch.priority,
        )
        response = _validated(model, raw)
        if isinstance(book, RequestBook) and n is not None and response.id:
            book.answered(n, response)  # its worker keeps it: the next request names it by key
        return response
    except ActivityError as e:
        cause = e.cause or e
        if isinstance(cause, CancelledError):
            raise runtime_failure(Cancelled("the run was cancelled during a model call")) from e
        if isinstance(cause, ApplicationError) and cause.type in _TOO_LARGE:
            raise runtime_failure(PayloadTooLarge(
                f"model {model!r} answered too large a response: {cause}",
                usage=_reported_usage(cause),
            )) from e
        if isinstance(cause, ApplicationError) and cause.type == CONTEXT_LENGTH:
            raise runtime_failure(ContextLengthExceeded(f"model {model!r} failed: {cause}")) from e
        raise runtime_failure(ModelRequestFailed(f"model {model!r} failed: {cause}")) from e
    finally:
        if isinstance(book, RequestBook) and n is not None:
            book.close(n)


def _validated(model: str, raw: Any) -> ModelResponse:
    try:
        return ModelResponse.model_validate(raw)
    except ValidationError as e:
        raise runtime_failure(
            ModelRequestFailed(f"model {model!r} answered an invalid response: {e}")
        ) from None


def _reported_usage(cause: ApplicationError) -> Usage | None:
    """The usage a failed model activity reported in its details (a response too large)."""
    try:
        return Usage.model_validate(cause.details[0]) if cause.details else None
    except (ValidationError, TypeError):
        return None
