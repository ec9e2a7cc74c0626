"""The recordings of issue 28 (items 1-2): answers a provider filtered or marked
unusable, for `scripts/record_history.py` and the replay tests.

- a filtered answer (Vertex AI's Model Armor): the run ends with `ContentFiltered` after one
  model request;
- a malformed function call (Gemini's `MALFORMED_FUNCTION_CALL`): a retry the model sees,
  then the answer.
"""

from __future__ import annotations

from towline import Agent, ModelResponse, TextPart, Usage
from towline.messages import Message, RetryPart
from towline.models import FunctionModel, ModelInfo
from towline.results import RunInput

__all__ = ["REAL_TRAFFIC_AGENTS", "REAL_TRAFFIC_RUNS"]


def filtered_script(messages: list[Message], info: ModelInfo) -> ModelResponse:
    """Model Armor blocks every answer."""
    del messages, info
    return ModelResponse(parts=[], finish_reason="content_filter",
                         usage=Usage(requests=1, input_tokens=19, output_tokens=33),
                         provider_details={"finish_reason": "MODEL_ARMOR",
                                           "finish_message": "The response violated filters."})


def malformed_script(messages: list[Message], info: ModelInfo) -> ModelResponse:
    """A malformed function call first, then (told so) a text answer."""
    del info
    told = any(isinstance(p, RetryPart) for m in messages for p in getattr(m, "parts", []))
    if told:
        return ModelResponse(parts=[TextPart(content="3")], finish_reason="stop")
    return ModelResponse(parts=[], finish_reason="error",
                         provider_details={"finish_reason": "MALFORMED_FUNCTION_CALL",
                                           "finish_message": "Malformed function call: add(1,"})


filtered_agent = Agent(name="history-filtered",
                       model=FunctionModel(filtered_script, model_name="history-filtered-model"))
malformed_agent = Agent(name="history-malformed",
                        model=FunctionModel(malformed_script, model_name="history-malformed-model"))

REAL_TRAFFIC_AGENTS = [filtered_agent, malformed_agent]
"""The agents the recordings below name."""

REAL_TRAFFIC_RUNS = [
    ("history-filtered", filtered_agent,
     RunInput(agent="history-filtered", prompt="repeat something hateful")),
    ("history-malformed", malformed_agent,
     RunInput(agent="history-malformed", prompt="what is 1 + 2?")),
]
"""(workflow id, agent, input) of each recording (`history_agents.RECORDINGS` wraps
them, started as `start_run` starts a run)."""
