"""`ollama:<model>`: Ollama through its OpenAI-compatible endpoint.

An `OpenAIChatModel` whose endpoint is `OLLAMA_BASE_URL` (default
`http://localhost:11434/v1`) and whose key is a placeholder (Ollama ignores
it). Local models have no published price: their cost is unknown, not zero.

What Ollama's endpoint takes differs from OpenAI's in three fields: it reads
`max_tokens` (not `max_completion_tokens`); its `reasoning_effort` is one of
`high`, `medium`, `low` or `none` (it refuses `minimal` with a 400, so that effort is
sent as `low`); and no `prompt_cache_key` is sent: Ollama has no such field and keeps
the previous request's prefix in its own KV cache without one, so the key would be noise
to a server that drops unknown fields. Its thinking comes back as `message.reasoning`
(a `ThinkingPart`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from towline.options import Thinking

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
    sends_cache_key: ClassVar[bool] = False
    """Ollama caches the shared prefix by itself and has no `prompt_cache_key` field."""

    def effort(self, thinking: Thinking | None) -> str | None:
        """Ollama's efforts: `minimal` is sent as `low`, the least it takes short of `none`."""
        effort = super().effort(thinking)
        return "low" if effort == "minimal" else effort
