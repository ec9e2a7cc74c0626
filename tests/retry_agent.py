"""An agent whose first answer is empty, so the run asks it again (an output retry): imported
by `towline run` as `tests.retry_agent:agent` (`tests/test_i41_output_retry.py`)."""

from __future__ import annotations

from towline import Agent
from towline.messages import Message, ModelRequest, RetryPart
from towline.models import FunctionModel, ModelInfo


def _model(messages: list[Message], info: ModelInfo) -> str:
    asked_again = any(isinstance(m, ModelRequest) and any(isinstance(p, RetryPart) for p in m.parts)
                      for m in messages)
    return "second time lucky" if asked_again else ""


agent = Agent(name="i41-output-retry", model=FunctionModel(_model, model_name="retry-offline"))
