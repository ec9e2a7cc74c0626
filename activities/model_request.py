"""The `towline.model_request` activity: one model call.

Temporal owns retries (see `model_errors`): a model's HTTP 4xx other than
408/409/429 is non-retryable, and `Retry-After` is honoured through
`next_retry_delay`. The activity heartbeats while the model works. Models
resolve from the worker's registry, then provider strings
(`openai:gpt-4.1-mini`, see `providers`), then built-in names. Inside an
`AgentRun` the request arrives by reference (`towline.runtime.request_chain`): its
messages and definitions come from this worker's `RequestCache` or, on a miss,
from the workflow through a query. The response gets its ids here (so the next
request can name it by key).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Generator, Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from towline.errors import ConfigurationError
from towline.messages import ModelResponse, ToolCallPart
from towline.models import FunctionModel, Model, ModelInfo, TestModel, resolve_model
from towline.native_tools import NATIVE_TOOLS
from towline.runtime.model_types import BackgroundModel
from towline.runtime.payloads import payload_limit, payload_size
from towline.runtime.request_chain import (
    REQUEST_INPUT_QUERY,
    RequestAnswer,
    RequestDefinitions,
    RequestQuery,
)
from towline.tools import ToolDefinition

from .guard import require_agent_run
from .heartbeat import with_heartbeats
from .io import (
    MODEL_ACTIVITY,
    MODEL_CANCEL_ACTIVITY,
    MODEL_POLL_ACTIVITY,
    BackgroundInput,
    ModelActivityInput,
)
from .model_errors import UNKNOWN_MODEL, activity_error
from .providers import is_provider_model, provider_model
from .providers.native import check_native_support
from .reports import check_usage
from .request_cache import RequestCache
from .retry_events import publish_retry
from .streaming import TextStream
from .telemetry import note_request_messages

__all__ = ["ModelActivities", "MODEL_ACTIVITY", "MODEL_POLL_ACTIVITY", "MODEL_CANCEL_ACTIVITY",
           "with_ids"]

_no_stream = contextlib.nullcontext()


def with_ids(response: ModelResponse) -> ModelResponse:
    """The response with an id, and an id for every tool call without one (unique)."""
    parts = [
        p.model_copy(update={"tool_call_id": f"call_{uuid.uuid4().hex[:16]}"})
        if isinstance(p, ToolCallPart) and not p.tool_call_id else p
        for p in response.parts
    ]
    return response.model_copy(update={"parts": parts, "id": response.id or uuid.uuid4().hex[:16]})


class ModelActivities:
    """Holds a worker's model registry and request cache; `model_request` is the activity."""

    def __init__(self, models: Mapping[str, Model]) -> None:
        self._models = dict(models)
        self.requests = RequestCache()

    def definitions(self) -> list[Any]:
        """The activities a worker registers: the request, and a background response's poll
        and cancel."""
        return [self.model_request, self.model_poll, self.model_cancel]

    def _model(self, name: str) -> Model:
        """The model a request names: the worker's registry, a provider string, a built-in."""
        try:
            return self._models.get(name) or provider_model(name) or resolve_model(name, self._models)
        except ConfigurationError as e:
            raise ApplicationError(str(e), type=UNKNOWN_MODEL, non_retryable=True) from e

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_request(self, req: ModelActivityInput) -> ModelResponse:
        """Call the selected model once."""
        require_agent_run()
        await publish_retry(req.run_step)  # a retry: why the attempt before failed (live event)
        model = self._model(req.model)
        key: str | None = None
        run = activity.info().workflow_id or ""
        if req.chain is not None:
            messages, defs, key = await self.requests.resolve(req.chain, run, self._ask)
        else:  # a model call outside an `AgentRun`: everything inline
            messages = req.messages
            defs = RequestDefinitions(tools=req.tools, output_tools=req.output_tools,
                                      settings=req.settings, output_mode=req.output_mode,
                                      output_schema=req.output_schema,
                                      native_tools=NATIVE_TOOLS.dump_python(req.native_tools, mode="json"))
        info = ModelInfo(
            tools=defs.tools, output_tools=defs.output_tools, settings=defs.settings,
            output_mode=defs.output_mode, output_schema=defs.output_schema,
            model_name=req.model, run_step=req.run_step, agent=req.agent,
            native_tools=NATIVE_TOOLS.validate_python(defs.native_tools),
        )
        note_request_messages(messages, defs.settings)
        with _mapped_errors():
            _check_request(model, info)  # before anything is sent
            async with TextStream(req.run_step) if defs.settings.stream else _no_stream:  # streaming
                response = await with_heartbeats(model.request(list(messages), info))
        response = self._answered(model, response)
        if key is not None:
            self.requests.produced(key, messages, response, run)
        return response

    @activity.defn(name=MODEL_POLL_ACTIVITY)
    async def model_poll(self, req: BackgroundInput) -> ModelResponse:
        """Ask the provider once how a background response is doing (`ModelSettings.background`):
        the finished response, or the response still `suspended`."""
        require_agent_run()
        model = self._background(req.model)
        info = ModelInfo(model_name=req.model, run_step=req.run_step, agent=req.agent,
                         output_tools=[ToolDefinition(name=n) for n in req.output_tools])
        with _mapped_errors():
            response = await model.poll(req.response_id, info)
        return self._answered(model, response)

    @activity.defn(name=MODEL_CANCEL_ACTIVITY)
    async def model_cancel(self, req: BackgroundInput) -> None:
        """Cancel a background response (its run was cancelled)."""
        require_agent_run()
        with _mapped_errors():
            await self._background(req.model).cancel(req.response_id)

    def _background(self, name: str) -> BackgroundModel:
        model = self._model(name)
        if not isinstance(model, BackgroundModel):
            raise ApplicationError(f"model {name!r} has no background mode", type=UNKNOWN_MODEL,
                                   non_retryable=True)
        return model

    def _answered(self, model: Any, response: ModelResponse) -> ModelResponse:
        """A model's answer as the activity returns it: priced, with ids, within bounds."""
        response = with_ids(_priced(model, response))
        check_usage(response.usage)
        _check_size(response)
        return response

    async def _ask(self, query: RequestQuery) -> RequestAnswer:
        info = activity.info()
        handle = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        raw: str = await handle.query(REQUEST_INPUT_QUERY, query, result_type=str)
        return RequestAnswer.model_validate_json(raw)


@contextlib.contextmanager
def _mapped_errors() -> Generator[None]:
    """A model's error raised as the activity's (`model_errors.activity_error`)."""
    try:
        yield
    except Exception as e:
        mapped = activity_error(e)
        if mapped is e:
            raise
        raise mapped from None  # the cause may name an endpoint: it stays out of history


def _check_request(model: Model, info: ModelInfo) -> None:
    """Refuse, before anything is sent, a request the model cannot make as asked: native
    tools its provider lacks, background mode it does not have (`ConfigurationError`: final)."""
    if info.native_tools and is_provider_model(model):
        check_native_support(model, info.native_tools)
    if info.settings.background and not isinstance(model, BackgroundModel):
        raise ConfigurationError(
            f"model {info.model_name!r} has no background mode (ModelSettings.background): "
            "only OpenAI Responses models (openai-responses:) run in the background")


def _priced(model: Model, response: ModelResponse) -> ModelResponse:
    """Mark a response unpriced when a model of the user's own did not report its cost.

    Offline models cost nothing and provider models price themselves; any other
    model's spend is unknown unless it says otherwise — unknown, not zero.
    """
    usage = response.usage
    if (isinstance(model, TestModel | FunctionModel) or is_provider_model(model)
            or usage.requests == 0 or usage.cost or usage.unpriced_requests):
        return response
    return response.model_copy(update={"usage": usage.model_copy(
        update={"unpriced_requests": usage.requests})})


def _check_size(response: ModelResponse) -> None:
    """Refuse a response too large for one payload, non-retryably.

    Temporal would reject it anyway (the SDK fails the completion, and retries
    would only repeat the cost); the workflow turns this into `PayloadTooLarge`.
    With a payload store (`towline.storage.payload_store`) the limit is the store's.
    """
    size = payload_size(activity.payload_converter(), response)
    limit = payload_limit(activity.info().task_queue)
    if size > limit:
        raise ApplicationError(
            f"model response of {size} bytes exceeds the {limit}-byte payload limit",
            response.usage.model_dump(mode="json"),  # spent all the same: the run counts it
            type="PayloadTooLarge", non_retryable=True,
        )
