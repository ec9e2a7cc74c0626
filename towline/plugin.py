"""`TowlinePlugin`: everything a client or worker needs to run towline agents.

Pass it to `Client.connect(plugins=[...])` (workers built from that client get
it too) or to `Worker(..., plugins=[...])`. It registers `AgentRun`, the model
activity, one activity per tool, the pydantic data converter, the sandbox
passthrough for towline and its dependencies, and the run failure types; when
a worker starts it registers the towline search attributes (idempotently).

`encryption=` adds an `EncryptionCodec` (see `towline.codec`): every payload
(inputs, model and tool I/O, memo, results, failure messages and details) is
encrypted before it reaches the server. Workers also get `ActivityTelemetry`,
towline's GenAI spans and metrics around model and tool activities.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from towline.activities import ModelActivities, make_tool_activity, search_attributes
from towline.activities.mcp import MCPActivities
from towline.activities.telemetry import ActivityTelemetry
from towline.agent import Agent, register_agents
from towline.codec import EncryptionCodec, KeyProvider
from towline.converter import (
    TowlineEncodedFailureConverter,
    TowlineFailureConverter,
    TowlinePayloadConverter,
    failure_converter_for,
)
from towline.errors import ConfigurationError, RunFailure
from towline.mcp import MCPServer
from towline.model_access import register_model_access
from towline.models import Model
from towline.registration import register_search_attributes
from towline.tools import Tool
from towline.workflows import AgentRun

__all__ = ["TowlinePlugin", "PASSTHROUGH_MODULES"]

_log = logging.getLogger("towline")

PASSTHROUGH_MODULES = (
    "towline", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
    "typing_inspection", "google.protobuf", "opentelemetry",
    # MCP tools validate their arguments with jsonschema in the workflow (pure computation).
    "jsonschema", "jsonschema_specifications", "referencing", "rpds", "attrs", "attr",
)


def _runner(existing: WorkflowRunner | None) -> WorkflowRunner:
    base = existing if isinstance(existing, SandboxedWorkflowRunner) else None
    restrictions = base.restrictions if base else SandboxRestrictions.default
    return SandboxedWorkflowRunner(restrictions=restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES))


def _converter(existing: DataConverter | None, encryption: EncryptionCodec | None = None) -> DataConverter:
    """towline's payload and failure converters, keeping any codec configured.

    With `encryption`, that codec encodes payloads (replacing an earlier
    `EncryptionCodec`, after any other codec) and failure messages travel encoded
    too (Temporal's encoded failure attributes), since they may quote content.
    """
    base = existing or DataConverter()
    codec = base.payload_codec
    failure_class = base.failure_converter_class
    if encryption is not None:
        if codec is None or isinstance(codec, EncryptionCodec):
            codec = encryption
        elif not (isinstance(codec, _Chain) and codec.outer is encryption):
            codec = _Chain(codec, encryption)
        if failure_class in (DefaultFailureConverter, TowlineFailureConverter):
            failure_class = TowlineEncodedFailureConverter
    failures = failure_converter_for(failure_class)
    if (base.payload_converter_class is TowlinePayloadConverter and codec is base.payload_codec
            and base.failure_converter_class is failures):
        return base
    return dataclasses.replace(base, payload_converter_class=TowlinePayloadConverter,
                               payload_codec=codec, failure_converter_class=failures)


@dataclasses.dataclass(frozen=True)
class _Chain(PayloadCodec):
    """A user's codec, then encryption (decoding in the reverse order)."""

    inner: PayloadCodec
    outer: EncryptionCodec

    async def encode(self, payloads: Sequence[Any]) -> list[Any]:
        return await self.outer.encode(await self.inner.encode(payloads))

    async def decode(self, payloads: Sequence[Any]) -> list[Any]:
        return await self.inner.decode(await self.outer.decode(payloads))


def _with_agent_run(existing: Sequence[type] | None) -> Sequence[type]:
    """Add `AgentRun` unless already listed (e.g. `Replayer(workflows=[AgentRun], plugins=...)`)."""
    workflows = list(existing or [])
    return workflows if AgentRun in workflows else [*workflows, AgentRun]


class TowlinePlugin(SimplePlugin):
    """Registers towline's workflow, activities and converter for a set of agents."""

    def __init__(
        self,
        agents: Sequence[Agent] = (),
        models: Mapping[str, Model] | None = None,
        *,
        allowed_models: Sequence[str] = (),
        encryption: EncryptionCodec | KeyProvider | None = None,
    ) -> None:
        """`agents` to run, `models` by name, and `allowed_models`: patterns (`"openai:*"`)
        of further models a run's input may switch an agent to (`RunInput.model`; the
        agent's own model and the registered names are always allowed). `encryption`: an
        `EncryptionCodec`, or the `KeyProvider` to build one from."""
        self.agents = [a for agent in agents for a in agent.all_agents()]
        self.models = self._model_registry(models or {})
        if isinstance(allowed_models, str):
            raise ConfigurationError("allowed_models is a list of patterns, not one string")
        self.allowed_models = tuple(allowed_models)
        self.tools = self._tool_registry()
        if encryption is not None and not isinstance(encryption, EncryptionCodec):
            encryption = EncryptionCodec(encryption)
        self.encryption: EncryptionCodec | None = encryption
        """The codec encrypting this client's or worker's payloads, if any."""
        self.mcp = MCPActivities(self._mcp_registry())
        self._running_workers = 0
        activities: list[Callable[..., Any]] = [
            ModelActivities(self.models).model_request,
            search_attributes,
            *(make_tool_activity(t) for t in self.tools.values() if not t.in_workflow),
            *self.mcp.definitions(),
        ]
        super().__init__(  # pyright: ignore[reportUnknownMemberType]
            "towline.TowlinePlugin",
            data_converter=lambda existing: _converter(existing, self.encryption),
            workflows=_with_agent_run,
            activities=activities,
            interceptors=[ActivityTelemetry(self.models)],
            workflow_runner=_runner,
            workflow_failure_exception_types=[RunFailure],
        )
        register_agents(self.agents)
        register_model_access(self.models, self.allowed_models)

    def _model_registry(self, models: Mapping[str, Model]) -> dict[str, Model]:
        registry = dict(models)
        for agent in self.agents:
            if isinstance(agent.model, str):
                continue
            name = agent.model.name
            if name in registry and registry[name] is not agent.model and registry[name] != agent.model:
                raise ConfigurationError(f"two different models are named {name!r}; name them apart")
            registry[name] = agent.model
        return registry

    def _tool_registry(self) -> dict[str, Tool]:
        tools: dict[str, Tool] = {}
        for agent in self.agents:
            for tool in agent.inventory.values():
                known = tools.get(tool.name)
                if known is not None and known.function is not tool.function:
                    raise ConfigurationError(
                        f"two different tools are named {tool.name!r} (activity {tool.activity_name})"
                    )
                tools[tool.name] = tool
        return tools

    def _mcp_registry(self) -> list[MCPServer]:
        servers: dict[str, MCPServer] = {}
        for agent in self.agents:
            for server in agent.mcp_servers:
                known = servers.get(server.name)
                if known is not None and known != server:
                    raise ConfigurationError(
                        f"two different MCP servers are named {server.name!r} (activity "
                        f"towline.mcp.{server.name}.list_tools); name them apart"
                    )
                servers[server.name] = server
        if servers:
            try:  # loaded before any sandbox imports it (a passthrough module)
                import jsonschema  # noqa: F401  # pyright: ignore[reportUnusedImport]
            except ImportError:
                raise ConfigurationError(
                    "agents with MCP servers need the MCP extra: pip install 'towline[mcp]'"
                ) from None
        return list(servers.values())

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Also make the agents resolvable on this worker's task queue."""
        queue: str | None = config.get("task_queue")  # pyright: ignore[reportUnknownMemberType]
        register_agents(self.agents, queue)
        register_model_access(self.models, self.allowed_models, queue)
        config = super().configure_worker(config)
        client = config.get("client")  # pyright: ignore[reportUnknownMemberType]
        if client is not None and (
            converter := _converter(client.data_converter, self.encryption)
        ) is not client.data_converter:
            # A worker given the plugin directly, over a client without it: its payloads
            # still need the pydantic converter (and the codec), on the same connection.
            client_config = client.config()
            client_config["data_converter"] = converter
            config["client"] = Client(**client_config)
        return config

    async def run_worker(
        self, worker: Worker, next: Callable[[Worker], Awaitable[None]]
    ) -> None:
        """Register the search attributes (idempotently) before the worker polls."""
        try:
            await register_search_attributes(worker.client, worker.client.namespace)
        except Exception as e:  # noqa: BLE001 - e.g. a namespace that forbids operator calls
            _log.warning("towline search attributes not registered: %s", e)
        self._running_workers += 1
        try:
            await super().run_worker(worker, next)
        finally:  # the last worker of this plugin closes its MCP connections (stdio servers stop)
            self._running_workers -= 1
            if self._running_workers == 0:
                await self.mcp.pool.aclose()
