"""Provider SDK errors as towline's: the one place both the request and the streaming code
of a provider translate an `openai` or `anthropic` exception (a status with its
`Retry-After`, a connection failure, anything else), with key and endpoint scrubbed.

A leaf of the providers package (it imports only `_common`), so `_stream` and the model
modules that stream (`openai_chat`, `anthropic`) share it without importing each other.
The SDKs are imported inside the functions, when an error is being translated.
"""

from __future__ import annotations

from ._common import Endpoint, connection_error, status_error

__all__ = ["openai_error", "anthropic_error"]


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
