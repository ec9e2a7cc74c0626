"""`TowlinePlugin`: everything a client or worker needs to run towline agents.

Pass it to `Client.connect(plugins=[...])` (workers built from that client get
it too) or to `Worker(..., plugins=[...])`. It registers `AgentRun`, the model
activity, one activity per tool, the activities capabilities declare, the
pydantic data converter, the sandbox passthrough for towline and its
dependencies, and the run failure types; when a worker starts it registers the
towline search attributes (idempotently). Its agents are this plugin's alone
(`towline.runtime.registry`): each worker built with it, and each `Replayer`, resolves
agent names in them, never in another plugin's.

`deployment=WorkerDeploymentVersion(name, build_id)` runs its workers under
Temporal's Worker Deployment Versioning with `AgentRun` pinned: a run finishes on
the build it started on, while new runs go to the deployment's current version.

`encryption=` adds an `EncryptionCodec` (see `towline.encryption.codec`): every payload
(inputs, model and tool I/O, memo, results, failure messages and details) is
encrypted before it reaches the server. `payload_store=` adds Temporal's external
storage (see `towline.storage.payload_store`): payloads over a threshold go to a blob
store (after encryption) and the history holds a reference. Workers also get
`ActivityTelemetry`, towline's GenAI spans and metrics around model and tool
activities.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from temporalio.client import Client, ClientConfig
from temporalio.common import HeaderCodecBehavior, VersioningBehavior, WorkerDeploymentVersion
from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkerDeploymentConfig,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from towline.activities import ModelActivities, make_tool_activity, search_attributes
from towline.activities.instructions import make_instructions_activity
from towline.activities.mcp import MCPActivities
from towline.activities.telemetry import ActivityTelemetry
from towline.agent import Agent
from towline.capabilities.base import cap_activities, cap_models
from towline.encryption.codec import EncryptionCodec, KeyProvider
from towline.errors import ConfigurationError, RunFailure
from towline.fleet.routing import ModelRoutes, register_model_queues
from towline.mcp import MCPServer
from towline.models import Model
from towline.runtime.converter import (
    TowlineEncodedFailureConverter,
    TowlineFailureConverter,
    TowlinePayloadConverter,
    failure_converter_for,
)
from towline.runtime.deps import WorkerSide, WorkerSideInterceptor
from towline.runtime.hashseed import warn_unless_pinned
from towline.runtime.heap import settle_heap
from towline.runtime.ledger_headers import LedgerHeaders
from towline.runtime.model_access import ModelAccess
from towline.runtime.payloads import register_payload_limit
from towline.runtime.registration import ATTRIBUTE_CACHE
from towline.runtime.registry import AgentsInterceptor, WorkerAgents
from towline.runtime.unreadable_payloads import without_store
from towline.storage.payload_store import PayloadStore
from towline.storage.payload_store import payload_store as payload_store_of
from towline.tools import HANDOFF_KEY, Tool
from towline.workflows import AgentRun
from towline.workflows.passthrough import PASSTHROUGH_MODULES

__all__ = ["TowlinePlugin", "PASSTHROUGH_MODULES"]

_log = logging.getLogger("towline")


def _runner(existing: WorkflowRunner | None) -> WorkflowRunner:
    base = existing if isinstance(existing, SandboxedWorkflowRunner) else None
    restrictions = base.restrictions if base else SandboxRestrictions.default
    return SandboxedWorkflowRunner(restrictions=restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES))


_WITHOUT_STORE = without_store()
"""Without a store, references are still read: as placeholders, never a stuck task."""


def _check_handoff_context(source: Agent, target: Agent) -> None:
    """A run keeps its context when it is handed off, and it is typed with the running
    agent's `context_type`: the target must take the same type, or none (then its tools get the
    plain JSON), or its tools would get the context typed by a model it was not made for."""
    if target.context_type is None or target.context_type is source.context_type:
        return
    theirs = source.context_type.__name__ if source.context_type is not None else "none"
    raise ConfigurationError(
        f"agent {source.name!r} hands off to agent {target.name!r}, whose context_type "
        f"{target.context_type.__name__} is not {source.name!r}'s ({theirs}): a run keeps "
        "its context when handed off, so give both agents the same context_type, or the "
        "target none")


def _converter(
    existing: DataConverter | None, encryption: EncryptionCodec | None = None,
    store: PayloadStore | None = None,
) -> DataConverter:
    """towline's payload and failure converters, keeping any codec configured.

    With `encryption`, that codec encodes payloads (replacing an earlier
    `EncryptionCodec`, after any other codec) and failure messages travel encoded
    too (Temporal's encoded failure attributes), since they may quote content.
    With `store`, its external storage (replacing any configured; the codec applies
    before a payload is stored).
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
    storage = (store.external_storage() if store is not None
               else base.external_storage or _WITHOUT_STORE)
    if (base.payload_converter_class is TowlinePayloadConverter and codec is base.payload_codec
            and base.failure_converter_class is failures and storage is base.external_storage):
        return base
    return dataclasses.replace(base, payload_converter_class=TowlinePayloadConverter,
                               payload_codec=codec, failure_converter_class=failures,
                               external_storage=storage)


@dataclasses.dataclass(frozen=True)
class _Chain(PayloadCodec):
    """A user's codec, then encryption (decoding in the reverse order)."""

    inner: PayloadCodec
    outer: EncryptionCodec

    async def encode(self, payloads: Sequence[Any]) -> list[Any]:
        return await self.outer.encode(await self.inner.encode(payloads))

    async def decode(self, payloads: Sequence[Any]) -> list[Any]:
        return await self.inner.decode(await self.outer.decode(payloads))


def _header_codec(config: ClientConfig) -> ClientConfig:
    """With a payload codec, headers are encoded (and decoded) by it too: the ledger's
    `towline.counters` header is then encrypted like every other payload. Temporal's default,
    `NO_CODEC`, would leave it plain; a behaviour chosen other than that default is kept."""
    converter: Any = config.get("data_converter")
    if (isinstance(converter, DataConverter) and converter.payload_codec is not None
            and config.get("header_codec_behavior", HeaderCodecBehavior.NO_CODEC)
            == HeaderCodecBehavior.NO_CODEC):
        config["header_codec_behavior"] = HeaderCodecBehavior.CODEC
    return config


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
        deployment: WorkerDeploymentVersion | None = None,
        accept_versions: Sequence[str] = (),
        payload_store: PayloadStore | str | None = None,
        model_queues: ModelRoutes | None = None,
        models_only: bool = False,
        deps: Any = None,
    ) -> None:
        """`agents` to run, `models` by name, and `allowed_models`: patterns (`"openai:*"`)
        of further models a run's input may switch an agent to (`RunInput.model`; the
        agent's own model and the registered names are always allowed). `encryption`: an
        `EncryptionCodec`, or the `KeyProvider` to build one from. `deployment`: run
        workers as this version of a Worker Deployment, `AgentRun` pinned.
        `accept_versions`: earlier agent versions (`towline.runtime.fingerprint`) this worker may
        replay, once `towline replay` showed them compatible. `payload_store`: a
        `PayloadStore` or its URL (`file://DIR`, `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`).
        `model_queues`: the task queues runs started on this plugin's workers send their model
        calls to (`towline.fleet.routing.ModelRoutes`; each run records them when it starts).
        `models_only`: serve the model activity alone (the worker of a model queue: no
        workflows, tools or other activities; see `towline.runtime.worker.fleet_workers`).
        `deps`: the worker-side dependencies (a database pool, an HTTP client, any object),
        handed to tool functions (`ToolContext.deps`), instructions functions
        (`InstructionsContext.deps`) and capability activities (`towline.current_deps()`);
        never serialised, never in a history (`towline.runtime.deps`)."""
        self.agents = [a for agent in agents for a in agent.all_agents()]
        self.models = self._model_registry(models or {})
        for name, value in (("allowed_models", allowed_models), ("accept_versions", accept_versions)):
            if isinstance(value, str):
                raise ConfigurationError(f"{name} is a list, not one string")
        self.allowed_models = tuple(allowed_models)
        self.tools = self._tool_registry()
        self.deployment = deployment
        """The Worker Deployment version of this plugin's workers, if versioned."""
        self.registry = WorkerAgents.of(
            self.agents, ModelAccess(frozenset(self.models), self.allowed_models),
            accepted_versions=accept_versions,
        )
        """The agents (and their versions) this plugin's workers serve."""
        if encryption is not None and not isinstance(encryption, EncryptionCodec):
            encryption = EncryptionCodec(encryption)
        self.encryption: EncryptionCodec | None = encryption
        """The codec encrypting this client's or worker's payloads, if any."""
        self.mcp = MCPActivities(self._mcp_registry())
        self._running_workers = 0
        self.payload_store: PayloadStore | None = payload_store_of(payload_store)
        """Where this client's or worker's large payloads go, if anywhere."""
        self.model_activities = ModelActivities(self.models)
        """The model activity's owner on workers built with this plugin (its request cache)."""
        self.model_queues = model_queues
        """Where runs started here send their model calls (None: their own task queue)."""
        self.models_only = models_only
        """Whether this plugin's workers serve model calls only."""
        self.deps = deps
        """The worker-side dependencies its workers hand to their activities."""
        side = WorkerSide(deps=deps, agents=self.registry.agents)
        activities: list[Callable[..., Any]] = [*self.model_activities.definitions()] if models_only else [
            *self.model_activities.definitions(),
            search_attributes,
            *(make_tool_activity(t) for t in self.tools.values() if t.runs_on_worker),
            *self.mcp.definitions(),
            *self._capability_activities(),
            *([make_instructions_activity(self.agents)]
              if any(callable(a.instructions) for a in self.agents) else []),
        ]
        super().__init__(  # pyright: ignore[reportUnknownMemberType]
            "towline.TowlinePlugin",
            data_converter=lambda existing: _converter(existing, self.encryption,
                                                       self.payload_store),
            workflows=None if models_only else _with_agent_run,
            activities=activities,
            interceptors=[ActivityTelemetry(self.models)] if models_only else [
                ActivityTelemetry(self.models), AgentsInterceptor(self.registry), LedgerHeaders(),
                WorkerSideInterceptor(side)],
            workflow_runner=_runner,
            workflow_failure_exception_types=[RunFailure],
        )

    def _model_registry(self, models: Mapping[str, Model]) -> dict[str, Model]:
        registry = dict(models)
        # the agents' own models, and those their capabilities' hooks call (a guardrail's)
        found = [m for agent in self.agents
                 for m in (agent.model, *(m for c in agent.capabilities for m in cap_models(c)))]
        for model in found:
            if isinstance(model, str):
                continue
            name = model.name
            if name in registry and registry[name] is not model and registry[name] != model:
                raise ConfigurationError(f"two different models are named {name!r}; name them apart")
            registry[name] = model
        return registry

    def _tool_registry(self) -> dict[str, Tool]:
        tools: dict[str, Tool] = {}
        names = {a.name for a in self.agents}
        for agent in self.agents:
            for tool in agent.inventory.values():
                target = tool.metadata.get(HANDOFF_KEY)
                if target is not None and target not in names:
                    raise ConfigurationError(
                        f"agent {agent.name!r} hands off to agent {target!r}, which this plugin "
                        "does not register: add it to agents=[...]")
                if target is not None:
                    _check_handoff_context(agent, next(a for a in self.agents if a.name == target))
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
                import re2  # noqa: F401  # pyright: ignore[reportUnusedImport, reportMissingTypeStubs]
            except ImportError:
                raise ConfigurationError(
                    "agents with MCP servers need the MCP extra: pip install 'towline[mcp]'"
                ) from None
        return list(servers.values())

    def _capability_activities(self) -> list[Callable[..., Any]]:
        """The activities the agents' capabilities declare their hooks call (each once)."""
        found: dict[str, Callable[..., Any]] = {}
        for agent in self.agents:
            for cap in agent.capabilities:
                for fn in cap_activities(cap):
                    definition = getattr(fn, "__temporal_activity_definition", None)
                    name = getattr(definition, "name", None)
                    if not isinstance(name, str):
                        raise ConfigurationError(
                            f"{cap!r} declares {fn!r} as an activity; decorate it with "
                            "@temporalio.activity.defn")
                    if found.setdefault(name, fn) is not fn:
                        raise ConfigurationError(f"two different activities are named {name!r}")
        return list(found.values())

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        """Also encode headers with the codec, when there is one (`_header_codec`)."""
        config = super().configure_client(config)
        return _header_codec(config)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Also run the worker as a pinned Worker Deployment version, when asked, and
        record its payload limit (a worker with a payload store stores large payloads)."""
        given = config.get("deployment_config")  # pyright: ignore[reportUnknownMemberType]
        if self.deployment is not None:
            config["deployment_config"] = WorkerDeploymentConfig(
                version=self.deployment, use_worker_versioning=True,
                default_versioning_behavior=VersioningBehavior.PINNED,
            )
        elif (given is not None and given.use_worker_versioning
              and given.default_versioning_behavior == VersioningBehavior.UNSPECIFIED):
            # a versioned worker configured by hand: AgentRun is pinned there too
            config["deployment_config"] = dataclasses.replace(
                given, default_versioning_behavior=VersioningBehavior.PINNED)
        queue: str | None = config.get("task_queue")  # pyright: ignore[reportUnknownMemberType]
        if self.payload_store is not None and queue:
            register_payload_limit(self.payload_store.max_payload_size, queue)
        if self.model_queues is not None and queue and not self.models_only:
            register_model_queues(queue, self.model_queues.table())
        config = super().configure_worker(config)
        client = config.get("client")  # pyright: ignore[reportUnknownMemberType]
        identity = config.get("identity") or (client.identity if client is not None else None)  # pyright: ignore[reportUnknownMemberType]
        if queue and identity:  # named by a run this worker cannot serve
            self.registry.identities[queue] = identity
        if client is not None and (
            converter := _converter(client.data_converter, self.encryption, self.payload_store)
        ) is not client.data_converter:
            # A worker given the plugin directly, over a client without it: its payloads
            # still need the pydantic converter (and the codec), on the same connection.
            client_config = client.config()
            client_config["data_converter"] = converter
            config["client"] = Client(**_header_codec(client_config))
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """Also warn if this process's string-hash seed is not towline's (`towline.runtime.hashseed`)."""
        warn_unless_pinned("replayer")
        config = super().configure_replayer(config)
        converter: DataConverter | None = config.get("data_converter")  # pyright: ignore[reportUnknownMemberType]
        if converter is not None and converter.payload_codec is not None:
            config["header_codec_behavior"] = HeaderCodecBehavior.CODEC
        return config

    async def run_worker(
        self, worker: Worker, next: Callable[[Worker], Awaitable[None]]
    ) -> None:
        """Register the search attributes (idempotently) and settle the process's heap
        (`towline.runtime.heap.settle_heap`) before the worker polls.

        The answer is kept in `ATTRIBUTE_CACHE`, so runs on this worker ask the server
        nothing more (see `towline.activities.search_attributes`).
        """
        warn_unless_pinned("worker")
        client, namespace = worker.client, worker.client.namespace
        try:
            await ATTRIBUTE_CACHE.register(client, namespace)
        except Exception as e:  # noqa: BLE001 - not even listed: runs ask again as they start
            _log.warning("towline search attributes not listed: %s", e)
        settle_heap()
        self._running_workers += 1
        try:
            await super().run_worker(worker, next)
        finally:  # the last worker of this plugin closes its MCP connections (stdio servers stop)
            self._running_workers -= 1
            if self._running_workers == 0:
                await self.mcp.pool.aclose()
