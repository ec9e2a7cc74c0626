"""The `towline.model_request` activity: one model call.

Temporal owns retries: a model's HTTP 4xx other than 408/429 is non-retryable,
and `Retry-After` is honoured through `next_retry_delay`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from towline.errors import ConfigurationError
from towline.messages import ModelResponse
from towline.models import Model, ModelHTTPError, ModelInfo, resolve_model

from .io import ModelActivityInput

__all__ = ["ModelActivities", "MODEL_ACTIVITY"]

MODEL_ACTIVITY = "towline.model_request"


class ModelActivities:
    """Holds a worker's model registry; `model_request` is the activity."""

    def __init__(self, models: Mapping[str, Model]) -> None:
        self._models = dict(models)

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_request(self, req: ModelActivityInput) -> ModelResponse:
        """Call the selected model once."""
        try:
            model = resolve_model(req.model, self._models)
        except (ConfigurationError, ImportError, AttributeError) as e:
            raise ApplicationError(str(e), type="UnknownModel", non_retryable=True) from e
        info = ModelInfo(
            tools=req.tools, output_tools=req.output_tools, settings=req.settings,
            model_name=req.model, run_step=req.run_step, agent=req.agent,
        )
        try:
            return await model.request(req.messages, info)
        except ModelHTTPError as e:
            delay = timedelta(seconds=e.retry_after) if e.retry_after is not None else None
            raise ApplicationError(
                str(e), type=f"HTTP{e.status}", non_retryable=not e.retryable,
                next_retry_delay=delay,
            ) from e
