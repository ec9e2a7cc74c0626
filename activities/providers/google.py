"""`google:<model>`: Gemini through the official `google-genai` SDK (`towline[google]`), on
the Gemini Developer API or Vertex AI (`google-vertex:<model>`).

Read on the worker when a request is made, never recorded:

- Gemini API: the key from `GOOGLE_API_KEY` or `GEMINI_API_KEY` (the SDK's own order:
  `GOOGLE_API_KEY` first), the endpoint from `GOOGLE_GEMINI_BASE_URL` (the variable the SDK
  itself honours) or the SDK's default.
- Vertex AI (`google-vertex:`, `GoogleModel(vertexai=True)`, or `google:` with
  `GOOGLE_GENAI_USE_VERTEXAI=true`): `GOOGLE_CLOUD_PROJECT` / `GOOGLE_CLOUD_LOCATION` with
  Application Default Credentials (or `credentials=`), or an API key (express mode: `api_key=`,
  or `GOOGLE_API_KEY` when no project is set); the endpoint from `GOOGLE_VERTEX_BASE_URL`.

The SDK's retries are off (one attempt per request, also for a pre-built `client=`), and
each request's timeout is the activity's: Temporal retries a 429 (after Gemini's `RetryInfo`
delay or a `Retry-After` header), a 5xx and a connection error; other 4xx are final; "The
input token count (...) exceeds the maximum number of tokens allowed" is
`ContextLengthExceeded`. Streaming reports thought text as `thinking` events and the answer
as `text` events, and gathers the chunks into the answer a plain request gets (`merge_chunks`).
The mapping is in `google_wire`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from towline.activities.streaming import text_delta, thinking_delta
from towline.errors import ConfigurationError
from towline.messages import Message, ModelResponse
from towline.runtime.model_types import ModelConnectionError, ModelHTTPError, ModelInfo

from ._common import (
    Endpoint,
    ProviderModel,
    cached_client,
    connection_error,
    field_map,
    import_sdk,
    items,
    remember_secrets,
    request_timeout,
    status_error,
)
from .google_wire import gemini_config, parse_response

__all__ = ["GoogleModel", "GoogleVertexModel", "GoogleEndpoint", "gemini_error", "google_error",
           "merge_chunks"]

_OVERFLOW = re.compile(r"input token count.*exceeds the maximum number of tokens", re.IGNORECASE | re.DOTALL)
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class GoogleEndpoint(Endpoint):
    """Where and as whom a Gemini request goes (resolved on the worker, never recorded)."""

    vertexai: bool = False
    project: str | None = None
    location: str | None = None


@dataclass(frozen=True)
class GoogleModel(ProviderModel):
    """A Gemini model (`google:<model>`, e.g. `google:gemini-2.5-flash`).

    `api_key=` / `base_url=` override the environment; `vertexai=True` (with `project=`,
    `location=`, `credentials=` or an express-mode `api_key=`) sends it to Vertex AI;
    `client=` hands it a pre-built `google.genai.Client`.
    """

    vertexai: bool | None = None
    """Vertex AI instead of the Gemini API (None: `GOOGLE_GENAI_USE_VERTEXAI`)."""
    project: str | None = None
    """The Google Cloud project (Vertex AI; default `GOOGLE_CLOUD_PROJECT`)."""
    location: str | None = None
    """The Google Cloud location (Vertex AI; default `GOOGLE_CLOUD_LOCATION`, else the SDK's)."""
    credentials: Any = field(default=None, repr=False, compare=False)
    """`google.auth` credentials for Vertex AI (default: Application Default Credentials)."""

    prefix: ClassVar[str] = "google"
    sdk: ClassVar[str] = "google.genai"
    extra: ClassVar[str] = "google"
    key_env: ClassVar[str] = "GEMINI_API_KEY"
    url_env: ClassVar[str] = "GOOGLE_GEMINI_BASE_URL"
    own_provider: ClassVar[str] = "google"
    native_family: ClassVar[str] = "google"

    @property
    def on_vertex(self) -> bool:
        """Whether requests go to Vertex AI (`vertexai=`, else `GOOGLE_GENAI_USE_VERTEXAI`)."""
        if self.vertexai is not None:
            return self.vertexai
        return os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip().lower() in _TRUE

    @property
    def system(self) -> str:
        """The OpenTelemetry `gen_ai.system` of its requests."""
        return "gcp.vertex_ai" if self.on_vertex else "gcp.gemini"

    def endpoint(self) -> GoogleEndpoint:
        """The API (Gemini or Vertex AI), endpoint and credentials, from the configuration or
        the worker's environment."""
        vertex = self.on_vertex
        url_env = "GOOGLE_VERTEX_BASE_URL" if vertex else self.url_env
        base_url = self.base_url or os.environ.get(url_env) or None
        env_key = os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or None
        if vertex:
            project = self.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
            location = self.location or os.environ.get("GOOGLE_CLOUD_LOCATION") or None
            # an explicit key is express mode; a project or credentials mean ADC; else the env key
            key = self.api_key or (None if project or self.credentials is not None else env_key)
            return GoogleEndpoint(base_url, key, vertexai=True, project=None if key else project,
                                  location=None if key else location)
        key = self.api_key or env_key
        if not key and self.client is None:
            raise ConfigurationError(
                f"model {self.name!r} needs an API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) "
                f"on the worker (or pass api_key=)")
        return GoogleEndpoint(base_url, key)

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """One `generateContent` request, or a streamed one (SDK retries off)."""
        endpoint = self.endpoint()
        contents, config = gemini_config(self.model, messages, info)
        try:
            client = self._client(endpoint)
            from google.genai import types

            config = _with_extra(config, info.settings.extra, set(types.GenerateContentConfig.model_fields))
            if info.settings.stream:
                data = await _streamed(client, self.model, contents, config)
            else:
                result = await client.aio.models.generate_content(
                    model=self.model, contents=contents, config=config)
                data = result.model_dump(exclude_none=True)
        except ConfigurationError:  # a ValueError too, but towline's own (the SDK is missing)
            raise
        except _sdk_errors() as e:
            raise google_error(e, endpoint, self.name) from None
        return self.price(parse_response(data, info, self.model), endpoint)

    def _client(self, endpoint: GoogleEndpoint) -> Any:
        """The SDK client for `endpoint` (one per worker, endpoint and event loop)."""
        genai = import_sdk(self.sdk, self.extra, self.name)
        if self.client is not None:
            return self.client
        remember_secrets(endpoint)
        key = ("google.genai", endpoint.vertexai, endpoint.base_url, endpoint.api_key,
               endpoint.project, endpoint.location, id(self.credentials))
        return cached_client(key, lambda: _make_client(genai, endpoint, self.credentials))


@dataclass(frozen=True)
class GoogleVertexModel(GoogleModel):
    """A Gemini model on Vertex AI (`google-vertex:<model>`): `GoogleModel(vertexai=True)`."""

    vertexai: bool | None = True

    prefix: ClassVar[str] = "google-vertex"
    url_env: ClassVar[str] = "GOOGLE_VERTEX_BASE_URL"


def _make_client(genai: Any, endpoint: GoogleEndpoint, credentials: Any) -> Any:
    from google.genai import types

    options = types.HttpOptions(base_url=endpoint.base_url,
                                retry_options=types.HttpRetryOptions(attempts=1))
    if endpoint.vertexai and not endpoint.api_key:
        return genai.Client(vertexai=True, project=endpoint.project, location=endpoint.location,
                            credentials=credentials, http_options=options)
    return genai.Client(vertexai=endpoint.vertexai, api_key=endpoint.api_key, http_options=options)


def _with_extra(config: dict[str, Any], extra: Mapping[str, Any], fields: set[str]) -> dict[str, Any]:
    """The config with `ModelSettings.extra`: `GenerateContentConfig` fields (`top_k`,
    `safety_settings`, ...) join it, other keys go into the request body as written; and this
    request's HTTP options: one attempt, the activity's timeout."""
    body = {k: v for k, v in extra.items() if k not in fields}
    options: dict[str, Any] = {"timeout": max(int(request_timeout() * 1000), 1),
                               "retry_options": {"attempts": 1}}
    if body:
        options["extra_body"] = body
    return {**config, **{k: v for k, v in extra.items() if k in fields},
            "automatic_function_calling": {"disable": True}, "http_options": options}


async def _streamed(client: Any, model: str, contents: list[dict[str, Any]],
                    config: dict[str, Any]) -> dict[str, Any]:
    """A streamed request (`streamGenerateContent?alt=sse`): each piece of text reported as it
    comes (thoughts as thinking), the chunks gathered into the whole answer."""
    chunks: list[dict[str, Any]] = []
    stream = await client.aio.models.generate_content_stream(model=model, contents=contents,
                                                             config=config)
    async for chunk in stream:
        data: dict[str, Any] = chunk.model_dump(exclude_none=True)
        for candidate in items(data.get("candidates"))[:1]:
            for part in items(field_map(candidate.get("content")).get("parts")):
                if part.get("text"):
                    report = thinking_delta if part.get("thought") else text_delta
                    report(str(part["text"]))
        chunks.append(data)
    answer = merge_chunks(chunks)
    finished = answer["candidates"][0].get("finish_reason")
    if not finished and not field_map(answer.get("prompt_feedback")).get("block_reason"):
        raise ModelConnectionError("google: the stream ended before the answer was complete")
    return answer


def merge_chunks(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Streamed `GenerateContentResponse` chunks gathered into the one answer they make: text
    pieces joined (thoughts apart from the answer; a signed piece ends its part), function
    calls as they came, the last finish reason, usage and model version."""
    parts: list[dict[str, Any]] = []
    answer: dict[str, Any] = {}
    candidate: dict[str, Any] = {}
    for chunk in chunks:
        for key in ("usage_metadata", "model_version", "response_id", "prompt_feedback"):
            if chunk.get(key):
                answer[key] = chunk[key]
        for c in items(chunk.get("candidates"))[:1]:
            candidate.update({k: c[k] for k in ("finish_reason", "finish_message") if c.get(k)})
            for key in ("grounding_metadata", "url_context_metadata"):  # on the last chunk
                if c.get(key):
                    candidate[key] = c[key]
            for part in items(field_map(c.get("content")).get("parts")):
                last = parts[-1] if parts else None
                if (last is not None and "text" in part and "text" in last
                        and bool(part.get("thought")) == bool(last.get("thought"))
                        and not last.get("thought_signature")):
                    last["text"] += str(part["text"])
                    if part.get("thought_signature"):
                        last["thought_signature"] = part["thought_signature"]
                else:
                    parts.append(dict(part))
    candidate["content"] = {"role": "model", "parts": parts}
    answer["candidates"] = [candidate]
    return answer


# --- errors --------------------------------------------------------------------------------


def _retry_info(error: Mapping[str, Any]) -> float | None:
    """Seconds from a `google.rpc.RetryInfo` detail (`"retryDelay": "37s"`), Gemini's way of
    saying when to retry a 429."""
    for detail in items(error.get("details")):
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = str(detail.get("retryDelay") or "").strip().removesuffix("s")
            try:
                return max(float(delay), 0.0)
            except ValueError:
                return None
    return None


def gemini_error(status: int, body: Any, headers: Mapping[str, str] | None,
                 endpoint: Endpoint) -> ModelHTTPError:
    """The `ModelHTTPError` for a Gemini error answer (`{"error": {code, message, status,
    details}}`): its message and status, the retry delay, and whether the context overflowed."""
    error = field_map(field_map(body).get("error")) or field_map(body)
    message = str(error.get("message") or f"HTTP {status}")
    state = error.get("status")
    err = status_error("google", status, {"error": {"message": message, "code": state}},
                       headers, endpoint)
    delay = err.retry_after if err.retry_after is not None else _retry_info(error)
    overflow = err.context_overflow or (status == 400 and bool(_OVERFLOW.search(message)))
    return ModelHTTPError(status, err.body, delay, context_overflow=overflow)


def _sdk_errors() -> tuple[type[Exception], ...]:
    """What the SDK raises: its API errors, its HTTP libraries' and `google.auth`'s, and the
    `ValueError` / `TypeError` of a request it refused to build (pydantic's included)."""
    from google.genai import errors

    found: list[type[Exception]] = [errors.APIError, ValueError, TypeError, OSError]
    found += [e for e in _transport_errors() if issubclass(e, Exception)]
    try:
        from google.auth import exceptions
    except ImportError:
        return tuple(found)
    return (*found, exceptions.GoogleAuthError)


def _transport_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for module, name in (("aiohttp", "ClientError"), ("httpx", "TransportError"),
                         ("httpx2", "TransportError"), ("google.auth.exceptions", "TransportError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def google_error(e: Exception, endpoint: Endpoint, model_name: str = "google") -> Exception:
    """The towline error for an exception of the SDK (messages scrubbed of key and endpoint)."""
    from google.genai import errors

    if isinstance(e, errors.APIError):
        response: Any = getattr(e, "response", None)
        raw: Any = getattr(response, "headers", None) or {}
        headers = {str(k).lower(): str(v) for k, v in raw.items()}
        details: Any = getattr(e, "details", None)
        return gemini_error(int(e.code or 500), details, headers, endpoint)
    if isinstance(e, _transport_errors()):
        return connection_error("google", e, endpoint)
    auth = _auth_error(e, model_name)
    if auth is not None:
        return auth
    if isinstance(e, json.JSONDecodeError):  # a garbled answer: retried like a broken one
        return RuntimeError(endpoint.scrub(f"google: the answer was not JSON: {e}"))
    if isinstance(e, ValueError | TypeError):  # the SDK refused the request before sending it
        return ModelHTTPError(400, endpoint.scrub(f"google: invalid request: {e}"))
    return RuntimeError(endpoint.scrub(f"google: {type(e).__name__}: {e}"))


def _auth_error(e: Exception, model_name: str) -> Exception | None:
    """Vertex AI without usable credentials: a configuration error (found none) or a final
    401 (they were refused)."""
    try:
        from google.auth import exceptions
    except ImportError:
        return None
    if isinstance(e, exceptions.DefaultCredentialsError):
        return ConfigurationError(
            f"model {model_name!r} found no Google Cloud credentials on the worker: set "
            f"GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login` "
            f"(or use an API key)")
    if isinstance(e, exceptions.RefreshError):
        return ModelHTTPError(401, "google: the Google Cloud credentials were refused")
    return None
