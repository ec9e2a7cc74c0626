"""What every provider model shares: configuration, endpoints, SDK clients, errors, arguments,
prices.

Provider code runs only inside the model activity, on the worker. SDKs are
imported when a request is made (an extra that is not installed is reported
as a configuration error naming the extra). Credentials and endpoints are read
from the model's configuration or the worker's environment at that moment and
go nowhere else: error messages are built from the provider's own message with
both scrubbed out, and the HTTP libraries' log lines have them redacted.

- Endpoints: where a provider's requests go, as resolved on the worker, and where that came
  from. An unreachable endpoint is named by its URL and by where the URL came from (the
  variable, `base_url=`, or the SDK's default), so a typo in ``OPENAI_BASE_URL`` or a server
  that is not running reads as such. The URL is shown without what can carry a credential
  (user information, the query, the fragment); the key never appears.
- Errors: an `openai` or `anthropic` SDK exception (a status with its `Retry-After`, a
  connection failure, anything else) is translated in one place for both the request and
  the streaming code (`openai_error`, `anthropic_error`); the SDKs are imported inside
  those functions, when an error is being translated.
- Prices: a response's usage priced with `genai-prices`, its native tool uses included.
  Unknown is not zero: a request whose price `genai-prices` does not know (or that used a
  native tool whose price it does not know) is counted in `Usage.unpriced_requests`.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import inspect
import json
import logging
import math
import os
import time
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from temporalio import activity

from towline.errors import ConfigurationError
from towline.messages import Message, ModelResponse, RetryPart, ThinkingPart, ToolReturnPart, Usage
from towline.runtime.addresses import is_local_host
from towline.runtime.model_types import ModelConnectionError, ModelHTTPError, ModelInfo

__all__ = [
    "ProviderModel", "Endpoint", "import_sdk", "cached_client", "items", "field_map", "parse_args",
    "return_text", "retry_text", "priced", "status_error", "connection_error", "provider_message",
    "remember_secrets", "remember_secret", "request_timeout", "DEFAULT_TIMEOUT", "unsupported_media",
    "own_thinking", "LOCAL_PLACEHOLDER_KEY", "NATIVE_PRICE_UNITS", "raw_json", "shown_url",
    "openai_error", "anthropic_error",
]

DEFAULT_TIMEOUT = 600.0
"""Seconds an SDK request may take outside an activity (inside one: its start-to-close)."""

_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_PHRASES = (
    "maximum context length", "context length", "context window", "prompt is too long",
    "exceed context limit", "exceeds the context", "too many tokens",
)


LOCAL_PLACEHOLDER_KEY = "no-key-local-endpoint"
"""The key sent to an endpoint on this machine when none is configured (the SDKs insist on
one; a keyless local server ignores it)."""


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


@dataclass(frozen=True)
class ProviderModel:
    """Configuration shared by the provider models: the model, its endpoint and credentials.

    `base_url` and `api_key` default to the worker's environment (each provider
    names its variables); `client` is a pre-built SDK client to use instead
    (towline turns its retries off). None of them is ever recorded: the run
    only knows the model's `name`.
    """

    model: str
    """The provider's model id, e.g. `gpt-4.1-mini`."""
    base_url: str | None = field(default=None, repr=False)
    """The API's base URL (default: the provider's, or its environment variable)."""
    api_key: str | None = field(default=None, repr=False)
    """The API key (default: the provider's environment variable, read on the worker)."""
    client: Any = field(default=None, repr=False, compare=False)
    """A pre-built SDK client (e.g. `openai.AsyncOpenAI(...)`) to send requests with."""
    model_name: str | None = None
    """The name runs select it by (default `<prefix>:<model>`, e.g. `openai:gpt-4.1-mini`)."""
    price_provider: str | None = None
    """The `genai-prices` provider id to price responses by; default: the provider's
    own for its own endpoint, found from `base_url` for others (unknown: unpriced)."""

    prefix: ClassVar[str] = ""
    """The provider string prefix (`openai`, `anthropic`, ...)."""
    sdk: ClassVar[str] = ""
    """The SDK's import name."""
    extra: ClassVar[str] = ""
    """The towline extra that installs the SDK."""
    key_env: ClassVar[str] = ""
    """The environment variable of the API key."""
    url_env: ClassVar[str] = ""
    """The environment variable of the base URL."""
    default_api_key: ClassVar[str | None] = None
    """The key used when none is configured (servers that ignore it), else required."""
    default_base_url: ClassVar[str | None] = None
    """The base URL used when none is configured, else the SDK's own."""
    own_provider: ClassVar[str] = ""
    """The `genai-prices` id of the provider's own endpoint."""
    native_family: ClassVar[str] = ""
    """The family of native tools the provider runs (`anthropic`, `openai`, `google`; "": it
    runs none, and a request asking for one fails before it is sent)."""

    def __post_init__(self) -> None:
        if not self.model or not isinstance(self.model, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"{type(self).__name__} needs a model id")

    @property
    def name(self) -> str:
        """The name runs use to select this model."""
        return self.model_name or f"{self.prefix}:{self.model}"

    async def request(self, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """Answer the messages (each provider's module implements it)."""
        raise NotImplementedError

    def endpoint(self) -> Endpoint:
        """The base URL and key, from the configuration or the worker's environment.

        A base URL on this machine (llama.cpp's server, vLLM, LM Studio, Ollama) needs no key:
        without one the SDK is given `LOCAL_PLACEHOLDER_KEY`, which such servers ignore.
        """
        configured_url = os.environ.get(self.url_env) if self.url_env else None
        base_url = self.base_url or configured_url or self.default_base_url
        source = ("base_url=" if self.base_url else self.url_env if configured_url
                  else f"the default; set {self.url_env} to use another" if base_url else None)
        api_key = self.api_key or os.environ.get(self.key_env) or self.default_api_key
        if not api_key and self.client is None:
            if base_url is not None and is_local_host(_host(base_url)):
                api_key = LOCAL_PLACEHOLDER_KEY
            else:
                where = f" (a local base URL, e.g. {self.url_env}=http://localhost:8080/v1, " \
                        "needs none)" if self.url_env else ""
                raise ConfigurationError(
                    f"model {self.name!r} needs an API key: set {self.key_env} on the worker "
                    f"(or pass api_key=){where}"
                )
        return Endpoint(base_url, api_key, url_source=source, url_env=self.url_env or None)

    def pricing(self, endpoint: Endpoint) -> dict[str, str] | None:
        """How `genai-prices` should find this endpoint's prices (None: do not price)."""
        if self.price_provider is not None:
            return {"provider_id": self.price_provider} if self.price_provider else None
        if endpoint.base_url is None and self.client is None:
            return {"provider_id": self.own_provider}
        if endpoint.base_url is not None:
            return {"provider_api_url": endpoint.base_url}
        return None

    def load_sdk(self) -> Any:
        """The SDK module (imported on first use), or a `ConfigurationError` naming the extra."""
        return import_sdk(self.sdk, self.extra, self.name)

    def sdk_client(self, endpoint: Endpoint, make: Callable[[Any, Any], Any], *key: Hashable) -> Any:
        """The SDK client `make(sdk_module, endpoint)` makes, once per worker, SDK, endpoint
        (its class and every field), `key` and event loop; or the pre-built `client`, its
        retries off."""
        module = self.load_sdk()
        if self.client is not None:
            return cached_client(("prebuilt", id(self.client)),
                                 lambda: self.client.with_options(max_retries=0))
        remember_secrets(endpoint)
        return cached_client((self.sdk, endpoint, *key), lambda: make(module, endpoint))

    def price(self, response: ModelResponse, endpoint: Endpoint) -> ModelResponse:
        """`response` with its usage priced by the model it names (else this one) at the
        prices `pricing(endpoint)` finds."""
        ref = response.model_name or self.model
        return response.model_copy(update={"usage": priced(response.usage, ref, self.pricing(endpoint))})


def import_sdk(module: str, extra: str, model_name: str) -> Any:
    """The SDK module, or a `ConfigurationError` saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigurationError(
            f"model {model_name!r} needs the {module!r} package, which is not installed on "
            f"this worker: pip install 'towline[{extra}]'"
        ) from None


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, Any]] = (
    weakref.WeakKeyDictionary()
)


def cached_client(key: Any, make: Callable[[], Any]) -> Any:
    """One client per key and event loop (an async HTTP pool belongs to the loop it runs in)."""
    _redact_http_logs()
    per_loop = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get(key)
    if client is None:
        client = per_loop[key] = make()
    return client


def request_timeout() -> float:
    """Seconds the SDK may wait for one response: the activity attempt's own timeout."""
    try:
        timeout = activity.info().start_to_close_timeout
    except RuntimeError:  # not in an activity (e.g. a direct call in a script)
        return DEFAULT_TIMEOUT
    return timeout.total_seconds() if timeout else DEFAULT_TIMEOUT


# --- arguments and returns ----------------------------------------------------------------


def items(value: Any) -> list[Mapping[str, Any]]:
    """The JSON objects of a JSON array (anything else: none)."""
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, Mapping)]  # pyright: ignore[reportUnknownVariableType]


def field_map(value: Any) -> Mapping[str, Any]:
    """A JSON object, or an empty one."""
    return value if isinstance(value, Mapping) else {}  # pyright: ignore[reportUnknownVariableType]


def parse_args(text: str | None) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments from JSON text: `(args, None)`, or `({}, text)` if not a JSON object."""
    if text is None or not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        return {}, text
    if not isinstance(value, dict):
        return {}, text
    return dict(value), None  # pyright: ignore[reportUnknownArgumentType]


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)


def return_text(part: ToolReturnPart) -> str:
    """A tool return as the model reads it: the content, with its status unless it succeeded."""
    text = _text(part.content)
    if part.status == "succeeded":
        return text
    hint = {
        "retry": "Try again.", "validation_error": "Fix the arguments and try again.",
    }.get(part.status, "")
    return f"[{part.status}] {text}{' ' + hint if hint else ''}"


def retry_text(part: RetryPart) -> str:
    """A retry prompt as the model reads it."""
    return f"{part.content}\nFix this and try again."


def unsupported_media(provider: str, media_type: str | None, where: str) -> ModelHTTPError:
    """The error for a media part the provider cannot take: raised while the request is
    built, before anything is sent; final (`ModelRequestFailed` naming the media type)."""
    kind = media_type or "unknown media type"
    return ModelHTTPError(400, f"{provider}: cannot send {kind!r} in {where}: this API does not "
                               f"accept that media type")


def own_thinking(part: ThinkingPart, family: str) -> bool:
    """Whether a thinking part goes back to a model of `family` (`anthropic`, `openai`,
    `google`): only the family that made it can read its signature; any other model gets
    the request without it (the history keeps it)."""
    return part.provider == family


# --- raw answers -------------------------------------------------------------------------


async def raw_json(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The JSON body of an SDK call made `with_raw_response`, kept exactly as it came (a native
    tool's encrypted content byte for byte, no field the SDK's types add): the async client's
    response reads it with `json()` (a coroutine), the legacy one holds it in `http_response`."""
    raw = await call(*args, **kwargs)
    reader = getattr(raw, "json", None)
    value = reader() if callable(reader) else raw.http_response.json()
    if inspect.isawaitable(value):
        value = await value
    return dict(field_map(value))


# --- errors ------------------------------------------------------------------------------


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    if not headers:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            parsed = email.utils.parsedate_tz(value) if name == "retry-after" else None
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - time.time()
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def provider_message(body: Any, fallback: str) -> tuple[str, str | None]:
    """The provider's error message and code (or type) from an error body."""
    if isinstance(body, Mapping):
        error: Any = body.get("error", body)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(error, Mapping):
            message: Any = error.get("message")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            code: Any = error.get("code") or error.get("type")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(message, str) and message:
                return message, str(code) if code else None  # pyright: ignore[reportUnknownArgumentType]
        elif isinstance(error, str) and error:
            return error, None
    if isinstance(body, str) and body.strip():
        return body.strip()[:500], None
    return fallback, None


def status_error(
    provider: str, status: int, body: Any, headers: Mapping[str, str] | None, endpoint: Endpoint
) -> ModelHTTPError:
    """The `ModelHTTPError` for an HTTP error answer, its message scrubbed of secrets."""
    message, code = provider_message(body, f"HTTP {status}")
    lowered = message.lower()
    overflow = status in (400, 413, 422) and (
        (code or "") in _CONTEXT_CODES or any(p in lowered for p in _CONTEXT_PHRASES)
    )
    text = endpoint.scrub(f"{provider}: {message}" + (f" ({code})" if code else ""))
    return ModelHTTPError(status, text, _retry_after(headers), context_overflow=overflow)


# --- logs --------------------------------------------------------------------------------

_LOGGER_PREFIXES = ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic",
                    "google_genai", "aiohttp", "botocore")


class _Redact(logging.Filter):
    """Takes the configured keys and endpoints out of HTTP and SDK log records."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        redacted = message
        for secret in sorted(self.secrets, key=len, reverse=True):
            redacted = redacted.replace(secret, "[redacted]")
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_FILTER = _Redact()


def remember_secrets(endpoint: Endpoint) -> None:
    """Redact this endpoint's key and address from the HTTP libraries' log lines."""
    _FILTER.secrets.update(endpoint.secrets())
    _redact_http_logs()


def remember_secret(secret: str) -> None:
    """Redact one more secret (a hosted MCP server's token) from those log lines."""
    if len(secret) >= 4:
        _FILTER.secrets.add(secret)
    _redact_http_logs()


def _redact_http_logs() -> None:
    names = [n for n in list(logging.root.manager.loggerDict)
             if n.split(".")[0] in _LOGGER_PREFIXES]
    for name in {*names, *_LOGGER_PREFIXES}:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


# --- endpoints ---------------------------------------------------------------------------


def shown_url(url: str) -> str:
    """`url` without user information, query and fragment (where credentials can ride)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # not a URL at all: say so rather than echo it
        return "(an invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", "")) or "(an empty URL)"


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom a request goes: resolved on the worker, never recorded."""

    base_url: str | None
    api_key: str | None
    url_source: str | None = field(default=None, kw_only=True)
    """Where `base_url` came from: the environment variable's name, ``base_url=``, or a
    sentence for a default (None: the SDK's own default URL)."""
    url_env: str | None = field(default=None, kw_only=True)
    """The variable that would set the URL, for the hint when the SDK's default is used."""

    def scrub(self, text: str) -> str:
        """`text` with the key and the endpoint (URL, host and port) taken out."""
        for secret in self.secrets():
            text = text.replace(secret, "[redacted]")
        return text

    def secrets(self) -> list[str]:
        """The strings that must not leave the worker, longest first."""
        found: list[str] = []
        if self.api_key and len(self.api_key) >= 4:
            found.append(self.api_key)
        if self.base_url:
            parts = urlsplit(self.base_url)
            found += [self.base_url.rstrip("/"), parts.netloc]
        return sorted({s for s in found if s}, key=len, reverse=True)

    def where(self, requested: str | None = None) -> str:
        """The endpoint as a person checks it: ``http://127.0.0.1:8080/v1 (OPENAI_BASE_URL)``;
        `requested` is the URL the SDK used when no base URL was configured."""
        if self.base_url:
            return f"{shown_url(self.base_url)} ({self.url_source or 'configured'})"
        default = f"{shown_url(requested)} " if requested else ""
        hint = f"; set {self.url_env} to use another" if self.url_env else ""
        return f"{default}(the SDK's default{hint})"


def connection_error(provider: str, error: BaseException,
                     endpoint: Endpoint | None = None) -> ModelConnectionError:
    """A retryable error for an endpoint that could not be reached, naming the endpoint and
    where its URL came from, and the cause (e.g. connection refused); never the key."""
    kind = "timed out" if "Timeout" in type(error).__name__ else "could not be reached"
    if endpoint is None:
        return ModelConnectionError(f"{provider}: the endpoint {kind} ({type(error).__name__})")
    request = getattr(error, "request", None)
    requested = str(getattr(request, "url", "")) or None
    cause = error.__cause__ or error.__context__
    because = f": {endpoint.scrub(str(cause))}" if cause is not None and str(cause) else ""
    origin = None
    if requested and not endpoint.base_url:
        parts = urlsplit(requested)
        origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    return ModelConnectionError(
        f"{provider}: the endpoint {endpoint.where(origin)} {kind} "
        f"({type(error).__name__}{because})")


# --- prices ------------------------------------------------------------------------------


NATIVE_PRICE_UNITS: dict[str, str] = {
    "web_search": "web_searches", "file_search": "storage_searches",
    "code_execution": "code_executions",
}
"""The `genai-prices` usage unit each native tool's uses are priced by (where it has one)."""


def priced(usage: Usage, model_ref: str, pricing: Mapping[str, str] | None) -> Usage:
    """`usage` with its cost from `genai-prices`, or counted unpriced when it is unknown.

    Native tool uses (`Usage.native_tool_uses`) are priced by the unit `NATIVE_PRICE_UNITS`
    names where the model's prices have one; a use of a tool without a known price leaves
    the request counted in `unpriced_requests` (its tokens and the known uses still cost)."""
    unpriced = usage.model_copy(update={"unpriced_requests": usage.requests, "cost": 0.0})
    if pricing is None:
        return unpriced
    try:
        prices = importlib.import_module("genai_prices")
    except ImportError:
        return unpriced
    units = {NATIVE_PRICE_UNITS[k]: n for k, n in usage.native_tool_uses.items()
             if n and k in NATIVE_PRICE_UNITS}
    tokens = prices.Usage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens or None,
        cache_write_tokens=usage.cache_write_tokens or None, **units,
    )
    try:
        calc = prices.calc_price(tokens, model_ref, **pricing)
    except (LookupError, ValueError):
        return unpriced
    known = {unit for unit in units if getattr(calc.model_price, f"{unit}_kcount", None) is not None}
    unknown_tools = any(n and NATIVE_PRICE_UNITS.get(k) not in known
                        for k, n in usage.native_tool_uses.items())
    return usage.model_copy(update={"cost": float(calc.total_price),
                                    "unpriced_requests": usage.requests if unknown_tools else 0})


# --- SDK errors --------------------------------------------------------------------------


def openai_error(e: Exception, endpoint: Endpoint) -> Exception:
    """The towline error for an OpenAI SDK error (messages scrubbed of key and endpoint)."""
    import openai

    if isinstance(e, openai.APIStatusError):
        return status_error("openai", e.status_code, e.body, e.response.headers, endpoint)
    if isinstance(e, openai.APIConnectionError):
        return connection_error("openai", e, endpoint)
    return RuntimeError(endpoint.scrub(f"openai: {type(e).__name__}: {e}"))


def anthropic_error(e: Exception, endpoint: Endpoint, provider: str = "anthropic") -> Exception:
    """The towline error for an Anthropic SDK error (messages scrubbed of key and endpoint)."""
    import anthropic

    if isinstance(e, anthropic.APIStatusError):
        return status_error(provider, e.status_code, e.body, e.response.headers, endpoint)
    if isinstance(e, anthropic.APIConnectionError):
        return connection_error(provider, e, endpoint)
    return RuntimeError(endpoint.scrub(f"{provider}: {type(e).__name__}: {e}"))
