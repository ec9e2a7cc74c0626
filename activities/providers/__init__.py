"""Model providers, one module each, named by string: `openai:`, `openai-responses:`,
`anthropic:`, `ollama:`, `google:` (Gemini), `google-vertex:` (Gemini on Vertex AI),
`azure:` (an Azure OpenAI deployment) and `bedrock:` (Claude on Amazon Bedrock), followed
by the provider's model id.

`provider_model("anthropic:claude-sonnet-4-5")` builds the model for such a
string (None for any other string). Nothing here imports a provider SDK: each
model imports its own when it makes a request, on the worker, so towline
without the extras installed still works and a run naming such a model fails
with `ModelRequestFailed` saying which extra to install.
"""

from __future__ import annotations

from towline.runtime.model_types import Model

from ._common import ProviderModel
from .anthropic import AnthropicModel
from .azure import AzureOpenAIModel
from .bedrock import BedrockModel
from .google import GoogleModel, GoogleVertexModel
from .ollama import OllamaModel
from .openai_chat import OpenAIChatModel
from .openai_responses import OpenAIResponsesModel

__all__ = [
    "PROVIDERS",
    "provider_model",
    "is_provider_model",
    "ProviderModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "AnthropicModel",
    "BedrockModel",
    "OllamaModel",
    "AzureOpenAIModel",
    "GoogleModel",
    "GoogleVertexModel",
]

PROVIDERS: dict[str, type[ProviderModel]] = {
    "openai": OpenAIChatModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
    "bedrock": BedrockModel,
    "ollama": OllamaModel,
    "azure": AzureOpenAIModel,
    "google": GoogleModel,
    "google-vertex": GoogleVertexModel,
}
"""Provider string prefixes and the model class each builds."""


def provider_model(name: str) -> Model | None:
    """The model a provider string names (`openai:gpt-4.1-mini`), or None for other names."""
    prefix, sep, model = name.partition(":")
    cls = PROVIDERS.get(prefix)
    if not sep or cls is None or not model:
        return None
    return cls(model=model)


def is_provider_model(model: object) -> bool:
    """Whether `model` is one of the provider models (they price their own responses)."""
    return isinstance(model, ProviderModel)
