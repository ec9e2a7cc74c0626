"""MCP servers as tool sources: the `MCPServer` definition and the tools listed from one.

An agent names its Model Context Protocol servers (`Agent(mcp_servers=[...])`):
a command to run over stdio, or a streamable-HTTP URL. This module is pure
(workflow-safe): it never imports the `mcp` SDK, which only the activities use
(`towline.activities.mcp`, installed with `towline[mcp]`).

What the workflow knows of a server is its name and options (prefix, timeouts,
idempotency): the command, URL, environment and headers are read by the worker
from its own copy of the agent definition, so no secret enters a workflow input,
a history or an activity payload. Listing is the activity
`towline.mcp.<server>.list_tools`, whose result (`MCPListResult`) is recorded in
the history; each listed tool becomes an `MCPTool` in the run's inventory under
`<prefix><tool>` and is called through the activity `towline.tool.<name>`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, cast

from pydantic import BaseModel, Field
from temporalio.common import RetryPolicy

from towline.errors import ConfigurationError
from towline.mcp.spec import MCPToolSpec
from towline.runtime.json_schemas import AnyArgs as _AnyArgs
from towline.runtime.json_schemas import checked_args
from towline.runtime.json_schemas import compiled_schema as _compiled_schema
from towline.tools import Tool, ToolContext

__all__ = [
    "MCPServer",
    "MCPToolSpec",
    "MCPListInput",
    "MCPListResult",
    "MCPCallInput",
    "MCPTool",
    "list_activity_name",
    "expand_env",
    "check_servers",
    "exposed_name",
    "NOT_STARTED",
    "IDEMPOTENCY_META",
]

NOT_STARTED = "ToolNotStarted"
"""`ApplicationError.type` of a tool activity that certainly did not start the tool's effect
(the MCP request never reached the server): retryable, and `failed`, never `unknown`."""
IDEMPOTENCY_META = "towline/idempotency_key"
"""The `_meta` key of every MCP tool call: the call's idempotency key, for servers that dedupe."""

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOL_NAME = 64
"""Longest tool name offered to models (the limit OpenAI and Anthropic share)."""


def list_activity_name(server: str) -> str:
    """The activity that lists `server`'s tools."""
    return f"towline.mcp.{server}.list_tools"


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: str, environ: Mapping[str, str]) -> str:
    """`value` with `${NAME}` and `${NAME:-default}` replaced from `environ` (the worker's).

    Raises `ConfigurationError` naming a variable that is unset and has no default.
    """

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        raise ConfigurationError(f"environment variable {name} is not set on the worker")

    return _VARIABLE.sub(replace, value)


def _names(owner: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigurationError(f"{owner} must be a list of tool names, not {value!r}")
    names = tuple(cast(Sequence[Any], value))
    if not all(isinstance(n, str) and n for n in names):
        raise ConfigurationError(f"{owner} must hold non-empty tool names")
    return cast(tuple[str, ...], names)


def _positive(owner: str, value: Any) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(f"{owner} must be a positive timedelta, not {value!r}")


@dataclass(frozen=True)
class MCPServer:
    """A Model Context Protocol server whose tools an agent may call.

    Give `command` (and `args`, `env`, `cwd`) for a server the worker starts and talks
    to over stdio, or `url` (and `headers`) for a streamable-HTTP server. The worker
    owns the connection: one per worker process and server, reused by every call and
    re-established after the server restarts. `env` and `headers` are read on the
    worker only and never enter a workflow's history. In all of these, `${NAME}` and
    `${NAME:-default}` are read from the worker's environment when it connects, so a
    secret need not even be in the agent's module (which may be imported where the
    environment is off limits, such as Temporal's workflow sandbox).
    """

    name: str
    """Unique within an agent; names the activities and, by default, prefixes the tools."""
    command: str | None = None
    """stdio: the executable that starts the server."""
    args: Sequence[str] = ()
    """stdio: its arguments."""
    env: Mapping[str, str] = field(default_factory=dict[str, str], repr=False)
    """stdio: environment variables for the server process (beside a minimal default set)."""
    cwd: str | None = None
    """stdio: the working directory of the server process."""
    url: str | None = None
    """Streamable HTTP: the server's endpoint, e.g. `http://127.0.0.1:8000/mcp`."""
    headers: Mapping[str, str] = field(default_factory=dict[str, str], repr=False)
    """Streamable HTTP: headers sent with every request (e.g. `Authorization`)."""
    prefix: str | None = None
    """Prepended to each listed tool's name; `None` means `"<name>_"`, `""` none."""
    tools: Sequence[str] | None = None
    """Only these of the server's tools (by their name on the server); `None`: all."""
    idempotent: bool | Sequence[str] = False
    """Tools safe to run twice (`True`: all), which Temporal retries after a lost
    connection or a worker crash; any other call that may have reached the server is
    recorded `unknown` and fails the run (`UncertainToolEffect`)."""
    trust_hints: bool = False
    """Also treat tools the server annotates `readOnlyHint` or `idempotentHint` as
    idempotent (hints are the server's claims: only for servers you trust)."""
    max_retries: int = 1
    """Consecutive failures the model is allowed per tool (as `Tool.max_retries`)."""
    timeout: timedelta = timedelta(minutes=5)
    """How long one attempt of a call may take."""
    heartbeat_timeout: timedelta = timedelta(seconds=30)
    """A call's activity heartbeats; a worker silent this long is presumed dead."""
    list_timeout: timedelta = timedelta(seconds=60)
    """How long one attempt of listing the tools may take (connecting included)."""
    connect_timeout: timedelta = timedelta(seconds=30)
    """How long the worker waits for the server to start and answer the handshake."""
    retry_policy: RetryPolicy | None = None
    """Temporal's retry policy for listing and calls (default: 5 attempts, backoff).
    Calls that may have reached the server are retried only for idempotent tools."""
    required: bool = True
    """A server that cannot be listed fails the run (`MCPServerUnavailable`); when
    False the run goes on without its tools (or with the last list it got)."""

    def __post_init__(self) -> None:
        owner = f"MCPServer {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.match(self.name):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"{owner}: name must be letters, digits, '_' or '-'")
        if (self.command is None) == (self.url is None):
            raise ConfigurationError(f"{owner}: give either command (stdio) or url (HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ConfigurationError(f"{owner}: url must start with http:// or https://")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ConfigurationError(f"{owner}: args, env and cwd are for stdio servers")
        if self.command is not None and self.headers:
            raise ConfigurationError(f"{owner}: headers are for HTTP servers")
        if isinstance(self.args, str):
            raise ConfigurationError(f"{owner}: args must be a list of strings")
        object.__setattr__(self, "args", tuple(str(a) for a in self.args))
        for label, mapping in (("env", self.env), ("headers", self.headers)):
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError(f"{owner}: {label} must map strings to strings")
            object.__setattr__(self, label, dict(mapping))
        if self.prefix is not None and self.prefix and not _NAME.match(self.prefix):
            raise ConfigurationError(f"{owner}: prefix must be letters, digits, '_' or '-'")
        if self.tools is not None:
            object.__setattr__(self, "tools", _names(f"{owner}: tools", self.tools))
        if not isinstance(self.idempotent, bool):
            object.__setattr__(self, "idempotent", _names(f"{owner}: idempotent", self.idempotent))
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"{owner}: max_retries must be an integer >= 0")
        for label in ("timeout", "heartbeat_timeout", "list_timeout", "connect_timeout"):
            _positive(f"{owner}: {label}", getattr(self, label))

    @property
    def tool_prefix(self) -> str:
        """What listed tool names are prefixed with."""
        return f"{self.name}_" if self.prefix is None else self.prefix

    @property
    def transport(self) -> str:
        """`stdio` or `http`."""
        return "stdio" if self.command is not None else "http"

    def effective_retry_policy(self) -> RetryPolicy:
        """The retry policy of listing and call activities."""
        if self.retry_policy is not None:
            return self.retry_policy
        return RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                           maximum_interval=timedelta(seconds=30), maximum_attempts=5)

    def is_idempotent(self, spec: MCPToolSpec) -> bool:
        """Whether calls of the listed tool `spec` may be retried after reaching the server."""
        if self.idempotent is True or (not isinstance(self.idempotent, bool) and spec.name in self.idempotent):
            return True
        return self.trust_hints and (spec.read_only or spec.idempotent_hint)


def check_servers(agent: str, servers: Sequence[MCPServer]) -> tuple[MCPServer, ...]:
    """An agent's servers, checked: `MCPServer` values with distinct names and prefixes."""
    found = tuple(servers)
    for s in found:
        if not isinstance(s, MCPServer):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(f"agent {agent!r}: mcp_servers holds a {type(s).__name__}, "
                                     "not an MCPServer")
    names = [s.name for s in found]
    prefixes = [s.tool_prefix for s in found]
    for label, values in (("named", names), ("prefixed", prefixes)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ConfigurationError(f"agent {agent!r}: two MCP servers are {label} {twice[0]!r}")
    return found


def exposed_name(server: MCPServer, remote: str) -> str:
    """The inventory name of the server's tool `remote`: prefixed, model-safe, at most 64 chars."""
    name = _UNSAFE.sub("_", server.tool_prefix + remote)
    if len(name) > MAX_TOOL_NAME:  # keep it unique: a short hash of the full name
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_TOOL_NAME - 9]}_{digest}"
    return name


# --- activity payloads ---------------------------------------------------------------------


class MCPListInput(BaseModel):
    """Input of `towline.mcp.<server>.list_tools`."""

    server: str
    """The server's name."""


class MCPListResult(BaseModel):
    """Result of `towline.mcp.<server>.list_tools`: the server's tools, in its order."""

    tools: list[MCPToolSpec] = Field(default_factory=list[MCPToolSpec])


class MCPCallInput(BaseModel):
    """Input of `towline.tool.<name>` for an MCP tool: which tool, validated arguments, context."""

    server: str
    """The server's name (the worker looks its definition up)."""
    tool: str
    """The tool's name on the server."""
    args: dict[str, Any]
    """Arguments, validated against the listed schema."""
    ctx: ToolContext
    """The call's context (its idempotency key goes to the server as `_meta`)."""
    idempotent: bool = False
    """Whether a call that may have reached the server may be made again."""


# --- listed tools in a run's inventory ---------------------------------------------------



def _remote(**_: Any) -> Any:
    """MCP tools run on their server, through the MCP call activity, never here."""
    raise RuntimeError("an MCP tool runs on its server")


@dataclass(frozen=True)
class MCPTool(Tool):
    """A tool listed by an MCP server: arguments checked against its JSON schema in the
    workflow, executed by the worker's MCP call activity."""

    server: str = ""
    """The server's name."""
    remote_name: str = ""
    """The tool's name on the server."""
    input_schema: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """The listed JSON schema of the arguments."""

    @classmethod
    def listed(cls, server: MCPServer, spec: MCPToolSpec) -> MCPTool:
        """The inventory entry for one listed tool (raises `ConfigurationError` for a bad schema)."""
        tool = cls(
            name=exposed_name(server, spec.name), function=_remote, description=spec.description,
            max_retries=server.max_retries, kind="function",
            metadata={"mcp_server": server.name, "mcp_tool": spec.name},
            idempotent=server.is_idempotent(spec), start_to_close_timeout=server.timeout,
            heartbeat_timeout=server.heartbeat_timeout, retry_policy=server.effective_retry_policy(),
            args_model=_AnyArgs, server=server.name, remote_name=spec.name,
            input_schema=spec.input_schema or {"type": "object"},
        )
        _ = tool.validator  # a schema the validator cannot read is rejected here
        return tool

    @property
    def json_schema(self) -> dict[str, Any]:
        """The listed JSON schema of the arguments object."""
        return dict(self.input_schema)

    @cached_property
    def validator(self) -> Any:
        """A jsonschema validator of the arguments (its draft from `$schema`, else 2020-12),
        from the one home of the workflow's schema validators (no reference outside the
        schema followed, patterns on RE2, a bounded check)."""
        try:
            return _compiled_schema(self.input_schema)
        except ValueError as e:
            raise ConfigurationError(f"MCP tool {self.remote_name!r} of {self.server!r} has an "
                                     f"invalid input schema: {e}") from None

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate against the listed schema; raises `pydantic.ValidationError` like any tool."""
        return checked_args(self.validator, args, self.name)
