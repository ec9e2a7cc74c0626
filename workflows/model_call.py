"""Durable model calls from workflow code: the run's own, and hooks' (summarisers, critics).

`call_model` schedules the `towline.model_request` activity. A hook that calls a
model reports the usage under `llm_usage` itself; the run's own calls are
counted by the runtime (`request_model` tells it how many requests one call made).

A response its provider has not finished (`ModelResponse.suspended`, engine 4) is
completed here, as more requests of the same call (`workflows.suspended`): an Anthropic
`pause_turn` is continued, an OpenAI background response polled. The caller gets the
finished response.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from towline.activities.io import MODEL_ACTIVITY, ModelActivityInput
from towline.errors import PayloadTooLarge, runtime_failure
from towline.messages import Message, ModelResponse
from towline.native_tools import NATIVE_TOOLS, NativeTool
from towline.options import (
    BACKGROUND_TIMEOUT,
    MODEL_HEARTBEAT_TIMEOUT,
    MODEL_POLL_INTERVAL,
    MODEL_POLL_MAX_INTERVAL,
    MODEL_TIMEOUT,
    ModelSettings,
    OutputMode,
    model_retry_policy,
)
from towline.runtime.request_chain import RequestBook, RequestDefinitions
from towline.tools import ToolDefinition

from .model_schedule import CallPlan, ModelCall, schedule_model_activity, validated
from .run import oversize, run_payload_limit
from .suspended import complete
from .versions import at_least

__all__ = ["call_model", "request_model", "DEFAULT_HEARTBEAT_TIMEOUT", "ModelCall"]

DEFAULT_HEARTBEAT_TIMEOUT = MODEL_HEARTBEAT_TIMEOUT
"""How long a model activity may go without a heartbeat before Temporal retries it
(`towline.options.MODEL_HEARTBEAT_TIMEOUT`, under its older name)."""
_ENGINE_4_RETRY_MAX_ATTEMPTS = 5
"""What a call without a retry policy was given before engine 5 (Temporal's other defaults:
up to 100 s between attempts, not `model_retry_policy`'s 30 s)."""


async def call_model(
    model: str,
    messages: list[Message],
    *,
    tools: list[ToolDefinition] | None = None,
    output_tools: list[ToolDefinition] | None = None,
    output_mode: OutputMode = "tool",
    output_schema: dict[str, Any] | None = None,
    settings: ModelSettings | None = None,
    native_tools: list[NativeTool] | None = None,
    run_step: int = 0,
    agent: str = "",
    summary: str | None = None,
    timeout: timedelta = MODEL_TIMEOUT,
    retry_policy: RetryPolicy | None = None,
    heartbeat_timeout: timedelta | None = DEFAULT_HEARTBEAT_TIMEOUT,
    poll_interval: timedelta = MODEL_POLL_INTERVAL,
    poll_max_interval: timedelta = MODEL_POLL_MAX_INTERVAL,
    background_timeout: timedelta = BACKGROUND_TIMEOUT,
) -> ModelResponse:
    """Call `model` durably (one activity). Raises `ModelRequestFailed` if it fails for good
    (`ContextLengthExceeded` when the request does not fit the model's context window).

    The activity heartbeats while it waits for the provider, so a worker that dies
    mid-request is noticed after `heartbeat_timeout` and the request retried elsewhere.
    The defaults are the agent's (`towline.options`); no `retry_policy` takes
    `model_retry_policy()`, as `Agent.model_retry_policy` does (engine 5).

    `output_mode` and `output_schema` (the output's JSON schema, in the `native` and
    `prompted` modes) reach the model in its `ModelInfo`, as do `native_tools` (the
    provider's own tools). A background call (`settings.background`) is polled after
    `poll_interval`, each later wait doubling up to `poll_max_interval`; still unfinished after
    `background_timeout`, it is cancelled and fails `BackgroundTimeout` (engine 5).

    Inside an `AgentRun`, the request travels by reference (`towline.runtime.request_chain`):
    its input names the messages a worker already holds with one key, so its size
    does not grow with the conversation.
    """
    call = await request_model(
        model, messages, tools=tools, output_tools=output_tools, output_mode=output_mode,
        output_schema=output_schema, settings=settings, native_tools=native_tools,
        run_step=run_step, agent=agent, summary=summary, timeout=timeout,
        retry_policy=retry_policy, heartbeat_timeout=heartbeat_timeout,
        poll_interval=poll_interval, poll_max_interval=poll_max_interval,
        background_timeout=background_timeout)
    return call.response


async def request_model(
    model: str,
    messages: list[Message],
    *,
    tools: list[ToolDefinition] | None = None,
    output_tools: list[ToolDefinition] | None = None,
    output_mode: OutputMode = "tool",
    output_schema: dict[str, Any] | None = None,
    settings: ModelSettings | None = None,
    native_tools: list[NativeTool] | None = None,
    run_step: int = 0,
    agent: str = "",
    summary: str | None = None,
    timeout: timedelta = MODEL_TIMEOUT,
    retry_policy: RetryPolicy | None = None,
    heartbeat_timeout: timedelta | None = DEFAULT_HEARTBEAT_TIMEOUT,
    poll_interval: timedelta = MODEL_POLL_INTERVAL,
    poll_max_interval: timedelta = MODEL_POLL_MAX_INTERVAL,
    background_timeout: timedelta = BACKGROUND_TIMEOUT,
    max_requests: int | None = None,
    answered: Callable[[ModelResponse], None] | None = None,
) -> ModelCall:
    """`call_model`, and how many model requests it made (more than one when the provider
    paused the turn: each continuation is a request, `max_requests` at most; `answered` is told
    of each paused piece before its continuation is sent, see `suspended.complete`)."""
    settings = settings or ModelSettings()
    if settings.background and not at_least(4):  # engine 4 polls; older runs never asked
        settings = settings.model_copy(update={"background": False})
    definitions = RequestDefinitions(tools=tools or [], output_tools=output_tools or [],
                                     settings=settings, output_mode=output_mode,
                                     output_schema=output_schema,
                                     native_tools=NATIVE_TOOLS.dump_python(native_tools or [], mode="json"))
    plan = CallPlan(
        model=model, run_step=run_step, agent=agent,
        summary=summary or _summary(model, run_step, native_tools or []),
        output_tools=[t.name for t in output_tools or []],
        timeout=timeout, retry_policy=retry_policy or _default_retry_policy(),
        heartbeat_timeout=heartbeat_timeout, poll_interval=poll_interval,
        poll_max_interval=poll_max_interval, max_requests=max_requests,
        background_timeout=background_timeout,
    )

    async def send(sent: list[Message]) -> ModelResponse:
        return await _request(plan, sent, definitions)

    response = await send(messages)
    if response.suspended is None:
        return ModelCall(response, 1, response.usage)
    if not at_least(4):  # older runs took a paused turn as it came
        return ModelCall(response.model_copy(update={"suspended": None}), 1, response.usage)
    return await complete(plan, messages, response, send, answered)


def _default_retry_policy() -> RetryPolicy:
    """The retry policy of a call that names none (a hook's, a built-in capability's): the
    agent's default (engine 5); before, only `maximum_attempts` was set (the runs recorded
    then keep the policy they scheduled)."""
    if at_least(5):
        return model_retry_policy()
    return RetryPolicy(maximum_attempts=_ENGINE_4_RETRY_MAX_ATTEMPTS)


def _summary(model: str, step: int, native: list[NativeTool]) -> str:
    """The model activity's summary in the UI: `<model> · step <n>`, then the provider's own
    tools it may run (`· web_search, code_execution`)."""
    tools = ", ".join(dict.fromkeys(t.kind for t in native))
    return f"{model} · step {step}" + (f" · {tools}" if tools else "")


async def _request(plan: CallPlan, messages: list[Message],
                   definitions: RequestDefinitions) -> ModelResponse:
    """One `towline.model_request` activity: the request by reference inside an `AgentRun`,
    inline elsewhere; its failures as the run's (`ModelRequestFailed`, ...)."""
    model = plan.model
    inp = ModelActivityInput(model=model, run_step=plan.run_step, agent=plan.agent)
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
        raw = await schedule_model_activity(plan, MODEL_ACTIVITY, inp, plan.summary)
        response = validated(model, raw)
        if isinstance(book, RequestBook) and n is not None and response.id:
            book.answered(n, response)  # its worker keeps it: the next request names it by key
        return response
    finally:
        if isinstance(book, RequestBook) and n is not None:
            book.close(n)
