"""`ollama:<model>`: Ollama through its OpenAI-compatible endpoint.

An `OpenAIChatModel` whose endpoint is `OLLAMA_BASE_URL` (default
`http://localhost:11434/v1`) and whose key is a placeholder (Ollama ignores
it). Local models have no published price: their cost is unknown, not zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from .openai_chat import OpenAIChatModel

__all__ = ["OllamaModel", "DEFAULT_OLLAMA_URL"]

DEFAULT_OLLAMA_URL = "http://localhost:11434/v1"


@dataclass(frozen=True)
class OllamaModel(OpenAIChatModel):
    """A model served by Ollama (`ollama:<model>`), e.g. `ollama:llama3.2`."""

    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_tokens"
    """Ollama's OpenAI endpoint reads `max_tokens`."""

    prefix: ClassVar[str] = "ollama"
    key_env: ClassVar[str] = "OLLAMA_API_KEY"
    url_env: ClassVar[str] = "OLLAMA_BASE_URL"
    default_api_key: ClassVar[str | None] = "ollama"
    default_base_url: ClassVar[str | None] = DEFAULT_OLLAMA_URL
    own_provider: ClassVar[str] = ""
