"""`ModelFallback`: when the model fails for good, try the next one.

In `wrap_model_call`, the request first goes to the run's model. If that model
activity fails non-retryably (say an HTTP 400) or exhausts Temporal's retries
(`ModelRequestFailed`), the same request goes to each fallback model in turn.
If every one fails, the run fails with the *primary* model's error, which is
the one worth fixing. Each attempt is its own activity in the history.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.errors import ConfigurationError, ModelRequestFailed
from towline.messages import ModelResponse

from .base import Capability, NextModelCall
from .state import ModelCallRequest

__all__ = ["ModelFallback"]


@dataclass(frozen=True, init=False)
class ModelFallback(Capability):
    """`ModelFallback("backup", "last-resort")`: fallback models, tried in order.

    Only failures that are final for a model trigger a fallback: retryable
    errors are retried by Temporal first, with the model's retry policy.
    """

    models: tuple[str, ...]
    """Fallback model names (`"test"` or registered with `TowlinePlugin(models=...)`), in order."""

    def __init__(self, *models: str) -> None:
        if not models:
            raise ConfigurationError("ModelFallback needs at least one fallback model")
        if not all(isinstance(m, str) and m for m in models):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"ModelFallback takes model names, not {models!r}")
        if len(set(models)) != len(models):
            raise ConfigurationError(f"ModelFallback: duplicate model names in {models!r}")
        object.__setattr__(self, "models", tuple(models))

    async def wrap_model_call(
        self, request: ModelCallRequest, next: NextModelCall
    ) -> ModelResponse:
        """Call the model; on `ModelRequestFailed` try each fallback; re-raise the first error."""
        try:
            return await next(request)
        except ModelRequestFailed as primary:
            for model in self.models:
                if model == request.model:
                    continue
                try:
                    return await next(request.model_copy(update={"model": model}))
                except ModelRequestFailed:
                    continue
            raise primary  # noqa: TRY201 - the primary error, explicitly
