"""Shared pieces of the `towline` CLI: errors, loading agents, connecting, UI addresses, output.

Every user mistake the CLI can detect (a missing module, a bad prompt file, an
unreachable server) becomes a `CliError`, which `towline.cli.main` prints as one
`towline: error: ...` line with its exit code, never as a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client
from temporalio.service import RPCError

from towline.agent import Agent
from towline.cli.render import terminal_text
from towline.client import connect, connect_config
from towline.devserver.ui_registry import recorded_ui
from towline.encryption.codec import EncryptionCodec
from towline.errors import ConfigurationError
from towline.runtime.addresses import LOCAL_HOSTS, is_local_host
from towline.storage.payload_store import STORE_ENV, PayloadStore, payload_store

__all__ = [
    "CliError",
    "port_in_use",
    "moved_port",
    "EXIT_USAGE",
    "EXIT_FAILURE",
    "EXIT_PENDING",
    "LOCAL_HOSTS",
    "load_agents",
    "load_agent",
    "load_deps",
    "read_prompt",
    "Target",
    "resolve_target",
    "connect_client",
    "encryption",
    "is_local",
    "port_free",
    "ui_base",
    "workflow_url",
    "one_line",
    "unreachable_reason",
    "payload_store_of",
    "embedded_store",
    "target_of",
    "connected",
    "history_from_end",
    "say",
    "stop_event",
    "GRACEFUL_SHUTDOWN",
]

EXIT_FAILURE = 1
"""Exit code of a command that failed (an unreachable server, a failed run)."""
EXIT_USAGE = 2
"""Exit code of a command given wrong arguments (argparse uses it too)."""
EXIT_PENDING = 3
"""Exit code of a decision, message or policy change no worker took within `--wait` but the
Temporal server holds: a worker that starts applies it (`towline.errors.DecisionPending`)."""

GRACEFUL_SHUTDOWN = timedelta(seconds=10)
"""How long a stopping CLI worker lets running tool and model activities finish.

An activity cut off mid-way may have taken effect: a non-idempotent tool is then recorded
`unknown` and its run fails with `UncertainToolEffect`, so Ctrl-C / SIGTERM give running
calls a chance to complete (their results are recorded, and a later worker goes on)."""


class CliError(Exception):
    """A failure to report as one line, `towline: error: <message>`, exiting with `code`
    (`label` in place of `error` for an outcome that is not a failure: `pending`)."""

    def __init__(self, message: str, code: int = EXIT_FAILURE, label: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.label = label


def one_line(err: BaseException | str, limit: int = 300) -> str:
    """A single-line, bounded rendering of an error (Rust client errors are long)."""
    text = str(err)
    if "ConnectionRefused" in text or "Connection refused" in text:
        return "connection refused"
    text = " ".join(text.split())
    if not text and isinstance(err, BaseException):
        text = type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _import_target(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"{spec!r} is not of the form module:attr (e.g. examples.calculator:agent)",
                       EXIT_USAGE)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # `towline run examples.calculator:agent` from a project root
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise CliError(
                f"cannot import {module_name!r}: no module named {missing!r} "
                f"(looked in {cwd} and the installed packages)", EXIT_USAGE,
            ) from None
        raise CliError(f"importing {module_name!r} failed: {one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while importing
        raise CliError(f"importing {module_name!r} failed: {type(e).__name__}: {one_line(e)}") from None
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}", EXIT_USAGE) from None
    return value


def load_agents(specs: Sequence[str]) -> list[Agent]:
    """The agents named by `module:attr` specs; an attr may be an `Agent` or a list of them."""
    agents: list[Agent] = []
    for spec in specs:
        value = _import_target(spec)
        found: list[Any] = list(value) if isinstance(value, list | tuple) else [value]  # pyright: ignore[reportUnknownArgumentType]
        for item in found:
            if not isinstance(item, Agent):
                raise CliError(f"{spec} is a {type(item).__name__}, not a towline Agent", EXIT_USAGE)
            if all(item is not a for a in agents):
                agents.append(item)
    names = [a.name for a in agents]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CliError(f"two different agents are named {duplicates[0]!r}", EXIT_USAGE)
    return agents


def load_deps(spec: str | None) -> Any:
    """The worker-side dependencies named by `--deps module:attr` (None without one): the
    object, or what a class or function there returns when called with no arguments."""
    if spec is None:
        return None
    value = _import_target(spec)
    if not callable(value):
        return value
    try:
        return value()
    except Exception as e:  # noqa: BLE001 - the user's factory raised
        raise CliError(f"--deps {spec}: calling it failed: {type(e).__name__}: {one_line(e)}") \
            from None


def load_agent(spec: str) -> Agent:
    """The single agent named by `module:attr`."""
    value = _import_target(spec)
    if not isinstance(value, Agent):
        raise CliError(f"{spec} is a {type(value).__name__}, not a towline Agent", EXIT_USAGE)
    return value


def read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt from the argument or from a file (`-` reads standard input)."""
    if prompt is not None and prompt_file is not None:
        raise CliError("give the prompt as an argument or with --prompt-file, not both", EXIT_USAGE)
    if prompt_file is not None:
        try:
            text = sys.stdin.read() if prompt_file == "-" else Path(prompt_file).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else one_line(e)
            raise CliError(f"cannot read prompt file {prompt_file!r}: {reason}", EXIT_USAGE) from None
        prompt = text.strip()
    if not prompt or not prompt.strip():
        raise CliError("the prompt is empty (give it as an argument or with --prompt-file)",
                       EXIT_USAGE)
    return prompt


def encryption(enabled: bool) -> EncryptionCodec | None:
    """The codec `--encrypt` asks for (keys from `TOWLINE_ENCRYPTION_KEY`); None without it."""
    if not enabled:
        return None
    try:
        return EncryptionCodec()
    except ConfigurationError as e:
        raise CliError(str(e), EXIT_USAGE) from None


def payload_store_of(url: str | None) -> PayloadStore | None:
    """The `PayloadStore` a URL names (None or "none": no store); `CliError` if malformed."""
    try:
        return payload_store(url)
    except ConfigurationError as e:
        raise CliError(str(e), EXIT_USAGE) from None


def embedded_store(state_dir: str | Path) -> str:
    """The embedded server's payload store: `file://<state dir>/payloads`."""
    return f"file://{(Path(state_dir) / 'payloads').resolve()}"


class Target:
    """Where the CLI connects: address and namespace from envconfig plus overrides."""

    def __init__(self, config: dict[str, Any], encrypt: bool = False) -> None:
        self.config = config
        self.address: str = str(config.get("target_host"))
        self.namespace: str = str(config.get("namespace") or "default")
        self.encryption: EncryptionCodec | None = encryption(encrypt)
        """The codec of `--encrypt`, if given."""
        self.payload_store: PayloadStore | None = self._store()
        """`TOWLINE_PAYLOAD_STORE`; else, for a local server, the embedded server's store
        (`.towline/payloads`) if this folder has one."""

    def _store(self) -> PayloadStore | None:
        url = os.environ.get(STORE_ENV)
        if url is None and is_local_host(self.host) and (Path(".towline") / "payloads").is_dir():
            url = embedded_store(".towline")
        return payload_store_of(url)

    @property
    def host(self) -> str:
        """The host part of the address."""
        return self.address.rsplit(":", 1)[0] if ":" in self.address else self.address

    @property
    def port(self) -> int | None:
        """The port part of the address, if it has one."""
        tail = self.address.rsplit(":", 1)[-1]
        return int(tail) if ":" in self.address and tail.isdigit() else None


def resolve_target(address: str | None, namespace: str | None, *, encrypt: bool = False) -> Target:
    """Read Temporal's environment configuration (TEMPORAL_ADDRESS, profiles) with overrides.

    `encrypt` (the `--encrypt` flag) makes clients of the target encrypt and decrypt payloads.
    """
    try:
        config = connect_config(address, namespace)
    except Exception as e:  # noqa: BLE001 - a malformed temporal.toml or environment value
        raise CliError(f"cannot read the Temporal client configuration: {one_line(e)}") from None
    return Target(config, encrypt)


def is_local(target: Target) -> bool:
    """Whether the address names this machine."""
    return is_local_host(target.host)


async def connect_client(
    target: Target, agents: Sequence[Agent] = (), *, timeout: float = 5.0, plugins: Sequence[Any] = ()
) -> Client:
    """A towline client of `target`; `CliError` if the server does not answer in `timeout`."""
    try:
        return await asyncio.wait_for(
            connect(target.address, target.namespace, agents=agents,
                    encryption=target.encryption, plugins=plugins,
                    payload_store=target.payload_store),
            timeout=timeout,
        )
    except ConfigurationError as e:  # the agents' plugin refused them (a ValueError too)
        raise CliError(f"the agents cannot be served: {e}", EXIT_USAGE) from None
    except ValueError as e:  # the SDK's parse of the address
        raise CliError(f"invalid Temporal address {target.address!r} (expected HOST:PORT): "
                       f"{one_line(e).removeprefix('invalid target URL: ')}", EXIT_USAGE) from None
    except (RuntimeError, RPCError, OSError, TimeoutError) as e:
        raise CliError(f"cannot reach the Temporal server at {target.address}: "
                       f"{unreachable_reason(e)}") from None


def target_of(args: Any) -> Target:
    """The server a command's connection options name (`--address`, `--namespace`, `--encrypt`)."""
    return resolve_target(args.address, args.namespace, encrypt=args.encrypt)


async def connected(args: Any, agents: Sequence[Agent] = ()) -> tuple[Client, Target]:
    """A towline client of the server a command's connection options name, and that target."""
    target = target_of(args)
    return await connect_client(target, agents), target


def unreachable_reason(err: BaseException) -> str:
    """Why a connection failed, in words (the Rust transport's errors are long and nested)."""
    if isinstance(err, TimeoutError):
        return "no answer"
    text = str(err)
    lowered = text.lower()
    if "dns error" in lowered or "failed to lookup address" in lowered:
        return "the host name does not resolve (DNS lookup failed)"
    if "connection refused" in lowered or "connectionrefused" in lowered:
        return "connection refused (is the server running, on this port?)"
    if "certificate" in lowered or "tls" in lowered or "handshake" in lowered:
        return f"TLS failed (check TEMPORAL_TLS* / the profile's TLS settings): {one_line(err, 160)}"
    if "unauthenticated" in lowered or "permission denied" in lowered:
        return f"not allowed (check TEMPORAL_API_KEY / the profile's credentials): {one_line(err, 160)}"
    return one_line(err)


def port_in_use(what: str, port: int) -> CliError:
    """The error for a port the user asked for that another process holds."""
    return CliError(f"the {what} port {port} is in use")


def moved_port(what: str, default: int, port: int) -> str:
    """The note for a default port another process holds, and the one used instead."""
    return f"port {default} is in use, so the {what} uses port {port}"


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on `host:port` right now.

    SO_REUSEADDR, as servers set it: connections of a server that just stopped linger in
    TIME_WAIT on its port, which would otherwise make a free port look taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ui_base(target: Target, explicit: str | None = None) -> str | None:
    """The Temporal UI's base URL for `target`, when it can be known.

    `explicit` (``--ui-url`` or ``TOWLINE_UI_URL``) wins; a local dev server serves its UI
    where `towline dev` recorded it, else on its gRPC port + 1000 (7233 -> 8233); Temporal
    Cloud has one UI for every namespace.
    """
    chosen = explicit or os.environ.get("TOWLINE_UI_URL")
    if chosen:
        return chosen.rstrip("/")
    if is_local(target) and target.port is not None:
        return recorded_ui(target.port) or f"http://localhost:{target.port + 1000}"
    if target.host.endswith(".tmprl.cloud"):
        return "https://cloud.temporal.io"
    return None


def workflow_url(base: str | None, namespace: str, workflow_id: str) -> str | None:
    """The UI page of one workflow."""
    if base is None:
        return None
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"


async def history_from_end(
    client: Client, workflow_id: str, run_id: str | None, page_size: int, pages: int,
) -> AsyncIterator[tuple[Sequence[HistoryEvent], bool]]:
    """Up to `pages` pages of one execution's history, newest event first, each with whether
    it is the last (nothing older): what is looked for is near the end of a long history."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=ExecutionRef(workflow_id=workflow_id, run_id=run_id or ""),
        maximum_page_size=page_size)
    for _ in range(pages):
        response = await client.workflow_service.get_workflow_execution_history_reverse(request)
        yield response.history.events, not response.next_page_token
        if not response.next_page_token:
            return
        request.next_page_token = response.next_page_token


def say(message: str) -> None:
    """Progress and status output (stderr, so stdout carries only answers), terminal control
    in it escaped (`render.terminal_text`: it quotes model and tool text)."""
    print(terminal_text(message), file=sys.stderr, flush=True)


def stop_event() -> asyncio.Event:
    """An event set by Ctrl-C (SIGINT) or SIGTERM, for a graceful shutdown."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # e.g. Windows
            loop.add_signal_handler(sig, event.set)
    return event
