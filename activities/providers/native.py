"""What the providers' native tools share on the worker: refusing what a provider cannot run,
a hosted MCP server's token, and the readable forms of what a provider reports.

A request asking for a native tool its provider lacks, or for an option the provider cannot
honour, fails before anything is sent: `UnsupportedNativeTool` (a `ConfigurationError`, so
the model activity fails for good and the run ends `ModelRequestFailed` naming the tool and
the provider).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from towline.errors import ConfigurationError
from towline.messages import Message, ModelResponse, NativeToolCallPart, NativeToolReturnPart
from towline.native_tools import HostedMCP, NativeTool, NativeToolBase

from ._common import ProviderModel, remember_secret

__all__ = ["UnsupportedNativeTool", "unsupported", "refuse_options", "check_native_support",
           "mcp_token", "SUPPORT", "native_parts", "uses_of"]

SUPPORT: dict[str, tuple[str, ...]] = {
    "web_search": ("openai-responses", "anthropic", "google"),
    "web_fetch": ("anthropic", "google"),
    "code_execution": ("openai-responses", "anthropic", "google"),
    "file_search": ("openai-responses",),
    "mcp": ("openai-responses", "anthropic"),
}
"""Which provider strings run each native tool (named in the error of one that does not)."""


class UnsupportedNativeTool(ConfigurationError):
    """A request asked a provider for a native tool (or an option of one) it does not have."""


def unsupported(model: str, tool: NativeToolBase, option: str | None = None,
                why: str | None = None) -> UnsupportedNativeTool:
    """The error for `tool` (or its `option`) on `model`, naming the providers that have it."""
    name = type(tool).__name__
    if option is not None:
        return UnsupportedNativeTool(
            f"model {model!r} cannot run native tool {name} with {option}=: "
            f"{why or 'its provider has no such option'} (nothing was sent)")
    others = ", ".join(f"{p}:" for p in SUPPORT.get(tool.kind, ())) or "none"
    return UnsupportedNativeTool(
        f"model {model!r} has no native tool {name}: its provider does not run it "
        f"({'it is in ' + others if others != 'none' else 'no provider does'}; nothing was sent)")


def refuse_options(model: str, tool: NativeToolBase, allowed: Iterable[str],
                   why: str | None = None) -> None:
    """Fail for the first option of `tool` set but not in `allowed` (it cannot be honoured)."""
    keep = set(allowed)
    for option in tool.options():
        if option not in keep:
            raise unsupported(model, tool, option, why)


def check_native_support(model: object, tools: Sequence[NativeTool]) -> None:
    """Fail for a provider model with no native tools at all (Chat Completions, Bedrock, ...);
    the others refuse what they lack while they build the request."""
    if isinstance(model, ProviderModel) and not model.native_family and tools:
        raise unsupported(model.name, tools[0])


def mcp_token(server: HostedMCP) -> str | None:
    """The hosted MCP server's bearer token, from the worker's environment (redacted from its
    logs); None when the server needs none."""
    if server.token_env is None:
        return None
    token = os.environ.get(server.token_env)
    if not token:
        raise ConfigurationError(f"HostedMCP {server.label!r} needs its token in {server.token_env} "
                                 "on the worker, which is not set")
    remember_secret(token)
    return token


def native_parts(messages: Sequence[Message], family: str) -> Iterable[NativeToolCallPart | NativeToolReturnPart]:
    """The native tool parts `family` made in `messages`, in order."""
    for m in messages:
        if isinstance(m, ModelResponse):
            for p in m.parts:
                if isinstance(p, NativeToolCallPart | NativeToolReturnPart) and p.provider == family:
                    yield p


def uses_of(calls: Iterable[str], reported: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Native tool uses by tool: the calls' names counted, each replaced by the count the
    provider `reported` for it where it did (Anthropic's `server_tool_use` usage)."""
    counts: dict[str, int] = {}
    for name in calls:
        counts[name] = counts.get(name, 0) + 1
    for name, value in (reported or {}).items():
        if isinstance(value, int) and value > 0:
            counts[name] = value
    return {k: counts[k] for k in sorted(counts)}
