"""Where a provider's requests go: the endpoint as resolved on the worker, where that came
from, and the error for an endpoint that could not be reached.

An unreachable endpoint is named by its URL and by where the URL came from (the variable,
`base_url=`, or the SDK's default), so a typo in ``OPENAI_BASE_URL`` or a server that is not
running reads as such. The URL is shown without what can carry a credential (user
information, the query, the fragment); the key never appears.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from towline.runtime.model_types import ModelConnectionError

__all__ = ["Endpoint", "connection_error", "shown_url"]


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
