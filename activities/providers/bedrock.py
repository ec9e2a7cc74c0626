"""`bedrock:<model>`: Claude on Amazon Bedrock, through the SDK's `AsyncAnthropicBedrock`.

The same Messages API body as `anthropic:` (the mapping, thinking, media,
cache breakpoints and native output of `anthropic`); the SDK moves the
model into the path (`POST /model/<model>/invoke`, or
`/invoke-with-response-stream`) and signs each request with SigV4. Everything
comes from the worker's environment, read when a request is made:

- the region: `AWS_REGION` or `AWS_DEFAULT_REGION` (or the profile's);
- the credentials: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (with
  `AWS_SESSION_TOKEN`), or `AWS_PROFILE`, or boto3's own chain (instance and
  container roles, SSO); a Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`, or
  `api_key=`) is sent instead of a signature when set;
- the endpoint: `ANTHROPIC_BEDROCK_BASE_URL` if set, else the region's.

SDK retries are off: Temporal retries, with the same error mapping as Anthropic's.
Responses are priced as `aws` (Bedrock) by `genai-prices`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from towline.errors import ConfigurationError
from towline.messages import Message, ModelResponse
from towline.runtime.model_types import ModelInfo

from ._common import Endpoint, import_sdk
from .anthropic import AnthropicModel

__all__ = ["BedrockModel", "BedrockEndpoint"]


@dataclass(frozen=True)
class BedrockEndpoint(Endpoint):
    """Where and as whom a Bedrock request goes (resolved on the worker, never recorded)."""

    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None

    def secrets(self) -> list[str]:
        """The key, the AWS credentials and the endpoint, longest first."""
        found = [*super().secrets(),
                 *(s for s in (self.access_key, self.secret_key, self.session_token)
                   if s and len(s) >= 4)]
        return sorted(set(found), key=len, reverse=True)


@dataclass(frozen=True)
class BedrockModel(AnthropicModel):
    """A Claude model on Amazon Bedrock (`bedrock:<model>`, e.g.
    `bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0`).

    `region=` and `api_key=` (a Bedrock API key) override the environment;
    `base_url=` the endpoint; `client=` a pre-built `AsyncAnthropicBedrock`.
    """

    region: str | None = None
    """The AWS region (default: `AWS_REGION` / `AWS_DEFAULT_REGION`, or the profile's)."""

    prefix: ClassVar[str] = "bedrock"
    extra: ClassVar[str] = "bedrock"
    key_env: ClassVar[str] = "AWS_BEARER_TOKEN_BEDROCK"
    url_env: ClassVar[str] = "ANTHROPIC_BEDROCK_BASE_URL"
    own_provider: ClassVar[str] = "aws"
    native_family: ClassVar[str] = ""  # Claude on Bedrock: no server tools through this client

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One Messages API request to Bedrock (SDK retries off: Temporal retries)."""
        try:
            return await super().request(messages, info)
        except RuntimeError as e:
            if "AWS credentials" not in str(e):
                raise
            raise ConfigurationError(
                f"model {self.name!r} found no AWS credentials on the worker: set "
                f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or "
                f"AWS_BEARER_TOKEN_BEDROCK") from None

    def endpoint(self) -> BedrockEndpoint:
        """The region, credentials and base URL, from the configuration or the environment."""
        env = os.environ
        base_url = self.base_url or env.get(self.url_env) or None
        region = self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
        api_key = self.api_key or env.get(self.key_env) or None
        if api_key:  # a Bedrock API key replaces the signature (the SDK takes one or the other)
            return BedrockEndpoint(base_url, api_key, region=region)
        access = env.get("AWS_ACCESS_KEY_ID") or None
        return BedrockEndpoint(
            base_url, None, region=region, access_key=access,
            secret_key=(env.get("AWS_SECRET_ACCESS_KEY") or None) if access else None,
            session_token=(env.get("AWS_SESSION_TOKEN") or None) if access else None,
            profile=None if access else (env.get("AWS_PROFILE") or None),
        )

    def connect(self) -> tuple[Endpoint, Any]:
        """The endpoint and its `AsyncAnthropicBedrock` (one per worker, endpoint and loop)."""
        import_sdk("botocore", self.extra, self.name)  # the SDK signs requests with it
        endpoint = self.endpoint()
        return endpoint, self.sdk_client(endpoint, self._make)

    def _make(self, module: Any, endpoint: BedrockEndpoint) -> Any:
        try:
            return module.AsyncAnthropicBedrock(
                aws_access_key=endpoint.access_key, aws_secret_key=endpoint.secret_key,
                aws_session_token=endpoint.session_token, aws_profile=endpoint.profile,
                aws_region=endpoint.region, api_key=endpoint.api_key,
                base_url=endpoint.base_url, max_retries=0)
        except ValueError as e:  # no region anywhere, or a key and credentials at once
            raise ConfigurationError(
                f"model {self.name!r}: {endpoint.scrub(str(e))} (set AWS_REGION on the worker)"
            ) from None
