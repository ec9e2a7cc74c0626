"""`azure:<deployment>`: a model deployed on Azure OpenAI, through `openai.AsyncAzureOpenAI`.

The Chat Completions mapping is `OpenAIChatModel`'s (reasoning effort, media, native
output, `prompt_cache_key`); only the client differs. On the worker it reads
`AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_ENDPOINT` (`https://<resource>.openai.azure.com`)
and `OPENAI_API_VERSION` (default `DEFAULT_API_VERSION`); the SDK sends each request to
`/openai/deployments/<deployment>/chat/completions?api-version=...` with an `api-key`
header, its retries off (Temporal retries). Responses are priced as Azure's by the model
the deployment reports serving (its `model` field), not by the deployment's name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from towline.errors import ConfigurationError

from ._common import Endpoint
from .openai_chat import OpenAIChatModel

__all__ = ["AzureOpenAIModel", "DEFAULT_API_VERSION"]

DEFAULT_API_VERSION = "2025-04-01-preview"
"""The Azure OpenAI data-plane API version used when `OPENAI_API_VERSION` is unset (one that
takes `reasoning_effort`, `json_schema` response formats and file inputs)."""


@dataclass(frozen=True)
class AzureOpenAIModel(OpenAIChatModel):
    """A deployment on Azure OpenAI (`azure:<deployment>`): `model` is the deployment's name.

    `base_url=` is the resource endpoint (default `AZURE_OPENAI_ENDPOINT`), `api_key=` its
    key (default `AZURE_OPENAI_API_KEY`), `api_version=` the API version (default
    `OPENAI_API_VERSION`, else `DEFAULT_API_VERSION`); `client=` takes a pre-built
    `openai.AsyncAzureOpenAI` instead.
    """

    api_version: str | None = None
    """The `api-version` query parameter (default: `OPENAI_API_VERSION` on the worker)."""

    prefix: ClassVar[str] = "azure"
    key_env: ClassVar[str] = "AZURE_OPENAI_API_KEY"
    url_env: ClassVar[str] = "AZURE_OPENAI_ENDPOINT"
    own_provider: ClassVar[str] = "azure"

    def endpoint(self) -> Endpoint:
        """The resource endpoint and key; an endpoint is required (Azure has no default)."""
        endpoint = super().endpoint()
        if endpoint.base_url is None and self.client is None:
            raise ConfigurationError(
                f"model {self.name!r} needs its Azure OpenAI endpoint: set {self.url_env} on "
                f"the worker (or pass base_url=)")
        return endpoint

    def pricing(self, endpoint: Endpoint) -> dict[str, str] | None:
        """Azure's prices (the endpoint is the resource's own, never a price source)."""
        if self.price_provider is not None:
            return {"provider_id": self.price_provider} if self.price_provider else None
        return {"provider_id": self.own_provider}

    def version(self) -> str:
        """The API version: configured, else the worker's `OPENAI_API_VERSION`, else the default."""
        return self.api_version or os.environ.get("OPENAI_API_VERSION") or DEFAULT_API_VERSION

    def make_client(self, module: Any, endpoint: Endpoint) -> Any:
        """An `AsyncAzureOpenAI` for the endpoint and the API version."""
        return module.AsyncAzureOpenAI(api_key=endpoint.api_key, azure_endpoint=endpoint.base_url,
                                       api_version=self.version(), max_retries=0)

    def sdk_client(self, endpoint: Endpoint, make: Callable[[Any, Any], Any], *key: Hashable) -> Any:
        """The client for the endpoint, one per API version too (and per worker and loop)."""
        return super().sdk_client(endpoint, make, "azure", self.version(), *key)
