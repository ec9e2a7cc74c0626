"""The providers' own tools: `Agent(native_tools=[WebSearch(), CodeExecution()])`.

A native tool runs on the provider's side, inside one model response: the model
searches the web, fetches a page, runs code in the provider's container, searches a
vector store or calls a remote MCP server, and answers with the results. towline does
not execute anything: it asks the provider for the tool, records what the provider
reports it did (`towline.messages.NativeToolCallPart` / `NativeToolReturnPart`), sends
that back as the provider's API requires, and counts its price.

Each tool maps to the provider's own:

| tool | OpenAI Responses | Anthropic | Gemini |
|---|---|---|---|
| `WebSearch` | `web_search` | `web_search_20250305` | `google_search` |
| `WebFetch` | — | `web_fetch_20250910` | `url_context` |
| `CodeExecution` | `code_interpreter` | `code_execution_20250825` | `code_execution` |
| `FileSearch` | `file_search` | — | — |
| `HostedMCP` | `mcp` | the MCP connector (`mcp_servers`) | — |

A provider without a requested tool, or without one of its options set, fails the run
with `ModelRequestFailed` naming both before anything is sent: an option silently
dropped (a blocked domain, a use limit) would change what the model may do.

The options are validated when a tool is built (`ConfigurationError` naming the
option). They are plain data, recorded with each model request (no credentials: a
hosted MCP server's token is read on the worker, from the variable `HostedMCP.token_env`
names).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from towline.errors import ConfigurationError

__all__ = [
    "NativeToolBase",
    "UserLocation",
    "WebSearch",
    "WebFetch",
    "CodeExecution",
    "FileSearch",
    "HostedMCP",
    "NativeTool",
    "NATIVE_TOOLS",
    "check_native_tools",
]

_DOMAIN = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
                     r"(/[^\s]*)?$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _Options(BaseModel):
    """Frozen, validated, no field it does not declare; a wrong option raises
    `ConfigurationError` naming the type and the option (pydantic's `ValidationError` when it
    is read back from JSON)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'options'}: "
                f"{err['msg'].removeprefix('Value error, ')}"
                for err in e.errors())
            raise ConfigurationError(f"{type(self).__name__}: {problems}") from None


class NativeToolBase(_Options):
    """What every native tool shares: its `kind`, and the options it sets."""

    kind: ClassVar[str] = ""
    """The tool's name in a run's history (`NativeToolCallPart.tool_name`)."""

    def options(self) -> dict[str, Any]:
        """The options set (not at their default), by field name: what a provider must honour."""
        return {name: getattr(self, name) for name in type(self).model_fields
                if name != "type" and name in self.model_fields_set
                and getattr(self, name) != type(self).model_fields[name].default}


def _list_of(what: str) -> BeforeValidator:
    """Refuses one string where a list of `what` is asked (it would pass as a list of letters)."""
    def check(value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(f"must be a list of {what}, not one string")  # noqa: TRY004 - pydantic reports ValueError
        return value
    return BeforeValidator(check)


def _domains(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError("must be a list of domains, not one string")  # noqa: TRY004 - pydantic reports ValueError
    if not value:
        raise ValueError("must name at least one domain (None: no filter)")
    for domain in value:
        if "://" in domain or not _DOMAIN.match(domain):
            raise ValueError(f"{domain!r} is not a domain (a host name such as 'example.com', "
                             "no scheme)")
    return tuple(value)


class UserLocation(_Options):
    """Where the user is, roughly, so a search can be local (every field optional)."""

    city: str | None = None
    """The city, e.g. `"San Francisco"`."""
    region: str | None = None
    """The region or state, e.g. `"California"`."""
    country: str | None = Field(default=None, pattern=r"^[A-Z]{2}$")
    """The two-letter ISO country code, e.g. `"US"`."""
    timezone: str | None = None
    """The IANA time zone, e.g. `"America/Los_Angeles"`."""


class _Domains(NativeToolBase):
    """A tool that reaches the web: which domains it may reach, and how often."""

    max_uses: int | None = Field(default=None, ge=1, le=1000)
    """At most this many uses in one response (None: the provider's limit)."""
    allowed_domains: Sequence[str] | None = None
    """Only these domains (host names, no scheme; None: any)."""
    blocked_domains: Sequence[str] | None = None
    """Never these domains (None: none blocked). Not together with `allowed_domains`."""

    @field_validator("allowed_domains", "blocked_domains", mode="before")
    @classmethod
    def _check_domains(cls, value: Any) -> Any:
        if isinstance(value, list):
            value = tuple(cast(list[Any], value))
        return _domains(value)

    @model_validator(mode="after")
    def _one_filter(self) -> Self:
        if self.allowed_domains is not None and self.blocked_domains is not None:
            raise ValueError("allowed_domains and blocked_domains cannot both be set (list the "
                             "allowed ones only)")
        return self


class WebSearch(_Domains):
    """The provider searches the web (OpenAI `web_search`, Anthropic `web_search_20250305`,
    Gemini `google_search`)."""

    type: Literal["web_search"] = "web_search"
    kind: ClassVar[str] = "web_search"
    user_location: UserLocation | None = None
    """Where the user is, for local results (OpenAI, Anthropic)."""
    search_context_size: Literal["low", "medium", "high"] | None = None
    """How much of the results the model reads (OpenAI only; None: the provider's default)."""


class WebFetch(_Domains):
    """The provider fetches web pages the conversation names (Anthropic `web_fetch_20250910`,
    Gemini `url_context`; OpenAI has none)."""

    type: Literal["web_fetch"] = "web_fetch"
    kind: ClassVar[str] = "web_fetch"
    citations: bool = False
    """Cite the fetched documents in the answer (Anthropic)."""
    max_content_tokens: int | None = Field(default=None, ge=1)
    """Cut a fetched page after this many tokens (Anthropic; None: whole pages)."""


class CodeExecution(NativeToolBase):
    """The provider runs code in a sandbox of its own (OpenAI `code_interpreter`, Anthropic
    `code_execution_20250825`, Gemini `code_execution`)."""

    type: Literal["code_execution"] = "code_execution"
    kind: ClassVar[str] = "code_execution"
    container: str | None = Field(default=None, min_length=1)
    """The id of an existing container to run in (OpenAI, Anthropic; None: a new one)."""
    file_ids: Annotated[Sequence[str], _list_of("file ids"), AfterValidator(tuple)] = ()
    """Uploaded files the container starts with (OpenAI file ids)."""


class FileSearch(NativeToolBase):
    """The provider searches vector stores of uploaded files (OpenAI `file_search`)."""

    type: Literal["file_search"] = "file_search"
    kind: ClassVar[str] = "file_search"
    vector_store_ids: Annotated[Sequence[str], _list_of("vector store ids"),
                                AfterValidator(tuple)] = Field(min_length=1)
    """The vector stores to search (at least one)."""
    max_num_results: int | None = Field(default=None, ge=1, le=50)
    """At most this many results per search (None: the provider's default)."""


class HostedMCP(NativeToolBase):
    """A remote MCP server the provider calls itself (OpenAI `mcp`, Anthropic's MCP connector).

    Unlike `towline.MCPServer` (whose tools the worker calls, each an activity), the
    provider talks to this server during the response; towline records its calls. Calls
    are made without asking for approval (`require_approval: "never"`): gate them with
    `allowed_tools`.
    """

    type: Literal["mcp"] = "mcp"
    kind: ClassVar[str] = "mcp"
    url: str = Field(pattern=r"^https?://\S+$")
    """The server's URL (the provider must reach it: `https://` on the internet)."""
    label: str
    """The server's name in the request and in the history (letters, digits, `-`, `_`)."""
    allowed_tools: Sequence[str] | None = None
    """Only these of the server's tools (None: all)."""
    token_env: str | None = None
    """The environment variable on the worker holding the server's bearer token (None: no
    token). Read when the request is sent, never recorded."""
    description: str | None = None
    """What the server is for (OpenAI `server_description`)."""

    @field_validator("label")
    @classmethod
    def _check_label(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError(f"{value!r} is not a server label (1-64 letters, digits, '-' or '_')")
        return value

    @field_validator("token_env")
    @classmethod
    def _check_env(cls, value: str | None) -> str | None:
        if value is not None and not _ENV.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("allowed_tools", mode="before")
    @classmethod
    def _check_tools(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("must be a list of tool names, not one string")  # noqa: TRY004 - pydantic reports ValueError
        if value is not None and (not value or not all(isinstance(v, str) and v for v in value)):
            raise ValueError("must hold at least one non-empty tool name (None: all)")
        return None if value is None else tuple(value)


NativeTool = Annotated[WebSearch | WebFetch | CodeExecution | FileSearch | HostedMCP,
                       Field(discriminator="type")]
"""One of the native tools, told apart by `type` when read back from JSON."""

NATIVE_TOOLS: TypeAdapter[list[NativeTool]] = TypeAdapter(list[NativeTool])
"""Validates and serialises a list of native tools."""


def check_native_tools(owner: str, tools: Any) -> tuple[NativeTool, ...]:
    """`tools` as a tuple, each a native tool, at most one of each kind (one `HostedMCP`
    per label); else `ConfigurationError` naming `owner`."""
    if isinstance(tools, NativeToolBase) or not isinstance(tools, list | tuple):
        raise ConfigurationError(f"{owner}: native_tools must be a list of native tools "
                                 f"(WebSearch(), CodeExecution(), ...), not {type(tools).__name__}")
    seen: set[str] = set()
    out: list[NativeTool] = []
    for tool in tools:  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(tool, WebSearch | WebFetch | CodeExecution | FileSearch | HostedMCP):
            raise ConfigurationError(f"{owner}: {tool!r} is not a native tool (WebSearch, WebFetch, "
                                     "CodeExecution, FileSearch, HostedMCP)")
        key = f"mcp:{tool.label}" if isinstance(tool, HostedMCP) else tool.kind
        if key in seen:
            raise ConfigurationError(f"{owner}: two native tools {key!r} (one of each; one "
                                     "HostedMCP per label)")
        seen.add(key)
        out.append(tool)
    return tuple(out)
