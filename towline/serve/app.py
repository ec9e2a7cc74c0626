"""The ASGI application of `towline serve`: an AG-UI endpoint per agent, resumable event streams,
approvals, and the web page.

    GET  /                                    the web page (no data; its requests carry the token)
    GET  /info                                {"agents": [...], "namespace", "temporalUi"}
    POST /agents/{name}                       AG-UI RunAgentInput -> AG-UI events (SSE)
    GET  /runs/{id}/events?from=N[&run_id=R]  the turn's events from offset N (SSE)
    POST /runs/{id}/approvals/{call_id}       {"decision": "approve"|"reject"|"edit"|"respond", ...}
                                              (202 {"decision": "pending"}: no worker took it yet)
    GET  /favicon.ico                         204, without the token (the page has its own icon)

A thread is a session (`RunInput.session`) whose workflow id is the AG-UI `threadId`: its
first message starts the run, later ones are its `send` update, so the conversation is one
durable run. A thread whose run has ended starts a new run with the thread's earlier
messages (user and assistant text) as its history. The input's `tools` are the run's client
tools (front-end tools); a call waiting for approval ends the AG-UI run with the interrupt
outcome, which the next input's `resume` answers (`towline.serve.waits`). Every SSE event
made from a run event
carries the event's offset as its `id`, and `GET /runs/{id}/events?from=N` resumes the turn
from offset N (the Workflow Streams offset) after a dropped connection.

Requests must be addressed to the server by a name it answers (`towline.serve.http_guard`: Host
and Origin), and with a bearer token set every request but the page's own needs it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib.resources import files
from typing import Any, Final, cast

from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent, RunStartedEvent
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from towline.agent import Agent
from towline.cli.common import workflow_url
from towline.cli.runstate import agent_name
from towline.client import ended_by, events, start_run
from towline.errors import DecisionNotApplied, DecisionPending, RunEnded
from towline.results import ClientToolSpec
from towline.review.delivery import deliver
from towline.serve.agui import TurnMapper, sse
from towline.serve.decide import (
    MAX_DECISION_BYTES,
    TIMEOUTS,
    UPDATE_WAIT,
    DecisionBody,
    Refusal,
    error,
    failure_reason,
    pending_calls,
    rpc_refusal,
    send_decision,
    send_results,
    send_resume,
    short,
)
from towline.serve.http_guard import GuardedApp, HostCheck, Receive, Scope, Send
from towline.serve.streaming import beating, thread_workflow_id
from towline.serve.waits import NewMessage, Resume, TurnInput, turn_input

__all__ = ["ServeConfig", "ServeApp", "create_app", "page_html", "HEARTBEAT", "UPDATE_WAIT"]

HEARTBEAT: Final = 15.0
"""Seconds of silence after which an open stream gets an SSE comment (proxies keep it open)."""
_OPEN = ("/", "/favicon.ico")
"""Paths a browser fetches without headers (no token): the page and its icon; no data."""


@dataclass(frozen=True)
class ServeConfig:
    """What the application serves, and to whom."""

    client: Client
    """A towline client (towline's data converter) of the Temporal server."""
    agents: Sequence[Agent]
    """The agents, each at `POST /agents/{name}`."""
    task_queue: str = "towline"
    """The task queue runs are started on."""
    ui: str | None = None
    """The Temporal UI's base URL, for links to a run (None: no links)."""
    hosts: HostCheck | None = None
    """The Host (and Origin) names it answers; None: loopback only."""
    token: str | None = None
    """The bearer token every request but the page's must carry; None: no token."""
    session_timeout: timedelta | None = None
    """How long a thread's run waits for the page's next message, or for a front-end tool's
    result (engine 5), before it ends; None: `RunInput`'s default, an hour."""
    update_wait: float = UPDATE_WAIT
    """Seconds a message or a decision waits for a worker to take it; then it is answered as
    pending (the Temporal server holds it: a worker that starts applies it) or not delivered."""

    def __post_init__(self) -> None:
        if not self.update_wait > 0:
            raise ValueError(f"ServeConfig: update_wait must be positive, not {self.update_wait!r}")
        if self.session_timeout is not None and self.session_timeout <= timedelta(0):
            raise ValueError("ServeConfig: session_timeout must be positive")
        names = [a.name for a in self.agents]
        if not names:
            raise ValueError("ServeConfig: agents must name at least one agent")
        if len(set(names)) != len(names):
            raise ValueError(f"ServeConfig: two agents are both named {names!r}")


def page_html() -> str:
    """The web page (a package data file: plain HTML and JavaScript, no build step)."""
    return (files("towline.serve") / "page.html").read_text(encoding="utf-8")


def _stream(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


class _Server:
    """The request handlers, over one configuration."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.closing = asyncio.Event()
        """Set when the server stops: open streams end (their readers resume elsewhere)."""
        self.client = config.client
        self.agents = {a.name: a for a in config.agents}

    def run_url(self, workflow_id: str) -> str | None:
        return workflow_url(self.config.ui, self.client.namespace, workflow_id)

    def streams(self, agent: str | None) -> bool:
        found = self.agents.get(agent or "")
        return bool(found and found.settings.stream)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(page_html(), headers={"cache-control": "no-store"})

    async def info(self, request: Request) -> Response:
        return JSONResponse({"agents": list(self.agents), "namespace": self.client.namespace,
                             "temporalUi": self.config.ui})

    async def favicon(self, request: Request) -> Response:
        return Response(status_code=204, headers={"cache-control": "max-age=86400"})

    async def run_agent(self, request: Request) -> Response:
        """`POST /agents/{name}`: one turn of the thread, as AG-UI events."""
        agent = self.agents.get(request.path_params["name"])
        if agent is None:
            return error(404, f"no agent {request.path_params['name']!r} here; agents: "
                         f"{', '.join(self.agents)}")
        try:
            inp = RunAgentInput.model_validate(json.loads(await request.body()))
            workflow_id = thread_workflow_id(inp.thread_id)
            turn = turn_input(inp)
        except (ValueError, ValidationError) as e:  # InputError, JSON and validation errors
            return error(422, f"not a RunAgentInput towline can run: {short(e)}")
        return _stream(self._turn(agent, inp, workflow_id, turn))

    async def _turn(self, agent: Agent, inp: RunAgentInput, workflow_id: str,
                    turn: TurnInput) -> AsyncIterator[str]:
        started = False
        try:
            handle, offset, sent = await self._begin(agent, inp, workflow_id, turn)
            # its id says where the turn's events start: a reader resumes from `offset`
            yield sse([self._started(inp, workflow_id, offset)], offset - 1)
            started = True
            mapper = TurnMapper(workflow_id, inp.thread_id, inp.run_id,
                                streaming=bool(agent.settings.stream), awaiting_user=sent,
                                interrupts=_takes_interrupts(inp))
            answered: set[str] = set()
            if not isinstance(turn, NewMessage):  # what still waits after the answers
                mapper.waiting = "resumed"
                answered = ({str(d["call_id"]) for d in turn.decisions} if isinstance(turn, Resume)
                            else {call_id for call_id, _ in turn.results})
            async for chunk in self._follow(handle, offset, mapper, answered):
                yield chunk
        except Exception as e:  # noqa: BLE001 - the stream has begun: the failure is its last event
            first = [] if started else [self._started(inp, workflow_id, None)]
            # `RunEnded`: the message ended the run (a guardrail tripped), or came late
            code = e.reason if isinstance(e, RunEnded) else type(e).__name__
            yield sse([*first, RunErrorEvent(message=failure_reason(e), code=code)])

    def _started(self, inp: RunAgentInput, workflow_id: str, offset: int | None) -> BaseEvent:
        towline = {"workflowId": workflow_id, "from": offset, "runUrl": self.run_url(workflow_id)}
        return RunStartedEvent(thread_id=inp.thread_id, run_id=inp.run_id,
                               metadata={"towline": towline})

    async def _begin(self, agent: Agent, inp: RunAgentInput, workflow_id: str,
                     turn: TurnInput) -> tuple[WorkflowHandle[Any, Any], int, bool]:
        """Start the thread's run, or send the message (or the answers) to it; the handle, the
        offset its events of this turn start from, and whether a message was sent."""
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id)
        running = await self._running_agent(handle)
        if running is None and isinstance(turn, NewMessage):
            tools = [ClientToolSpec(name=t.name, description=t.description,
                                    parameters=t.parameters or {"type": "object"})
                     for t in inp.tools or ()]
            try:
                started = await start_run(self.client, agent, turn.text, id=workflow_id,
                                          session=True, task_queue=self.config.task_queue,
                                          message_history=turn.earlier or None,
                                          client_tools=tools or None,
                                          session_timeout=self.config.session_timeout)
                return started, 0, False
            except WorkflowAlreadyStartedError:
                running = await self._running_agent(handle)  # another request started it
        if running is None:
            raise TurnRefused(f"thread {workflow_id!r} has no live run to take these answers")
        if running and running != agent.name:
            raise TurnRefused(f"thread {workflow_id!r} is a run of agent {running!r}, "
                              f"not {agent.name!r}")
        try:
            offset = await asyncio.wait_for(
                WorkflowStreamClient.create(self.client, workflow_id).get_offset(), UPDATE_WAIT)
            wait = self.config.update_wait
            if isinstance(turn, NewMessage):
                await self._send(handle, turn.text)
            elif isinstance(turn, Resume):
                await send_resume(handle, turn.decisions, turn.by, wait)
            else:
                await send_results(handle, turn.results, wait)
        except TIMEOUTS:
            raise TurnRefused(f"no worker answered within {UPDATE_WAIT:g}s (is a worker for "
                              f"agent {agent.name!r} running?)") from None
        except DecisionNotApplied as e:  # what became of it, exactly (pending, or not sent)
            raise TurnRefused(f"{e.message} (is a worker for agent {agent.name!r} "
                              "running?)") from None
        return handle, offset, isinstance(turn, NewMessage)

    async def _send(self, handle: WorkflowHandle[Any, Any], text: str) -> None:
        from towline.workflows import AgentRun, SendInput

        try:
            update = await deliver(handle, AgentRun.send, SendInput(content=text),
                                   self.config.update_wait)
            try:  # a refusal (the validator) comes back with its outcome already known
                await asyncio.wait_for(update.result(), 0.2)
            except TIMEOUTS:
                pass  # accepted: the run answers it in turn
        except (WorkflowUpdateFailedError, RPCError) as e:
            # the run ended (the message tripped a guardrail, say): its own reason
            if (ended := await ended_by(handle, e)) is None:
                raise
            raise ended from None

    async def _running_agent(self, handle: WorkflowHandle[Any, Any], *,
                             live: bool = True) -> str | None:
        """The agent of the thread's run ("" if unknown); None: no run (`live`: no live run)."""
        try:
            desc = await handle.describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if live and desc.status != WorkflowExecutionStatus.RUNNING:
            return None
        return await agent_name(self.client, desc) or ""

    async def _follow(self, handle: WorkflowHandle[Any, Any], offset: int, mapper: TurnMapper,
                      answered: Collection[str] = ()) -> AsyncIterator[str]:
        """The turn's events from `offset` as SSE, until it ends or the server stops
        (keep-alive comments between); a turn that waits ends with what it waits for."""
        if mapper.waiting is not None:  # answers were sent: end at once if others still wait
            still = [c for c in await pending_calls(handle) if c.call_id not in answered]
            ending = mapper.finish_waiting(still)
            if ending:
                yield sse(ending)
                return
        async for event in beating(events(handle, from_offset=offset), HEARTBEAT, self.closing):
            if event is None:
                yield ": keep-alive\n\n"
                continue
            yield sse(mapper.map(event), event.offset)
            if mapper.waiting is not None:
                ending = mapper.finish_waiting(await pending_calls(handle))
                if ending:
                    yield sse(ending)
            if mapper.finished:
                return

    async def resume(self, request: Request) -> Response:
        """`GET /runs/{id}/events?from=N`: the rest of the turn from offset N (approvals do
        not end it: they are decided with the REST endpoint)."""
        workflow_id = request.path_params["id"]
        raw = request.query_params.get("from", "0")
        if not (raw.isascii() and raw.isdigit()):  # `isdigit()` alone takes "²"
            return error(422, f"from must be an offset (0, 1, ...), not {raw!r}")
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id)
        agent = await self._running_agent(handle, live=False)
        if agent not in self.agents:  # none, or another agent's run: not this server's to show
            return error(404, f"no run {workflow_id!r}")
        mapper = TurnMapper(workflow_id, workflow_id,
                            request.query_params.get("run_id") or workflow_id,
                            streaming=self.streams(agent), interrupts=False)

        async def body() -> AsyncIterator[str]:
            try:
                async for chunk in self._follow(handle, int(raw), mapper):
                    yield chunk
            except Exception as e:  # noqa: BLE001 - the stream has begun: the failure ends it
                yield sse([RunErrorEvent(message=failure_reason(e), code=type(e).__name__)])

        return _stream(body())

    async def decide(self, request: Request) -> Response:
        """`POST /runs/{id}/approvals/{call_id}`: decide a waiting tool call (approve, reject,
        edit, respond), through the run's update of that name."""
        workflow_id, call_id = request.path_params["id"], request.path_params["call_id"]
        raw = await request.body()
        if len(raw) > MAX_DECISION_BYTES:
            return error(413, f"a decision is at most {MAX_DECISION_BYTES:,} bytes of JSON "
                         f"(this one is {len(raw):,}): Temporal refuses larger updates")
        try:
            body = DecisionBody.model_validate_json(raw)
        except ValidationError as e:
            return error(422, 'expected {"decision": "approve"|"reject"|"edit"|"respond", '
                         f'"digest": ..., "reason": ..., "args": {{...}}, "result": ...}}: {short(e)}')
        handle: WorkflowHandle[Any, Any] = self.client.get_workflow_handle(workflow_id)
        try:
            if await self._running_agent(handle) not in self.agents:  # gone, or not ours
                return error(404, f"no live run {workflow_id!r}")
            done = await send_decision(handle, call_id, body, self.config.update_wait)
        except DecisionPending as e:  # not a failure: a worker that starts applies it
            return JSONResponse({"workflowId": workflow_id, "callId": call_id,
                                 "decision": "pending", "message": e.message}, status_code=202)
        except DecisionNotApplied as e:  # not delivered, or not known
            return error(504, e.message)
        except WorkflowUpdateFailedError as e:
            return error(409, f"{body.kind} refused: {failure_reason(e)}")
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return error(404, f"no live run {workflow_id!r}")
            return error(*rpc_refusal(e))
        return JSONResponse({"workflowId": workflow_id, "callId": call_id, "decision": done})


class TurnRefused(Refusal):
    """A message the thread's run cannot take (another agent's run, no worker, no run)."""


def _takes_interrupts(inp: RunAgentInput) -> bool:
    """Whether an approval ends the AG-UI run with the interrupt outcome: yes, unless the
    client's `forwardedProps` say `{"towline": {"interrupts": false}}` (towline's page, which
    decides with the REST endpoint while the stream goes on)."""
    props: Any = inp.forwarded_props
    towline: Any = cast(dict[str, Any], props).get("towline") if isinstance(props, dict) else None
    return not (isinstance(towline, dict) and cast(dict[str, Any], towline).get("interrupts") is False)


class ServeApp:
    """The ASGI application (`create_app`). The page is guarded by the Host and Origin checks
    only, everything else by the token too: a browser's navigation to the page cannot carry a
    bearer token, and the page holds no data."""

    def __init__(self, config: ServeConfig) -> None:
        self._server = _Server(config)
        server = self._server
        app = Starlette(routes=[
            Route("/", server.page, methods=["GET"]),
            Route("/info", server.info, methods=["GET"]),
            Route("/favicon.ico", server.favicon, methods=["GET"]),
            Route("/agents/{name}", server.run_agent, methods=["POST"]),
            Route("/runs/{id}/events", server.resume, methods=["GET"]),
            Route("/runs/{id}/approvals/{call_id}", server.decide, methods=["POST"]),
        ])
        hosts = config.hosts or HostCheck.serving("127.0.0.1")
        self._page = GuardedApp(app, hosts)
        self._api = GuardedApp(app, hosts, config.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        is_page = (scope["type"] == "http" and scope.get("path") in _OPEN
                   and scope.get("method") == "GET")
        if scope["type"] == "http" and scope.get("method") == "POST" and not _json_body(scope):
            # a form or `text/plain` post needs no CORS preflight: another page could send one
            refused = error(415, "a POST needs Content-Type: application/json")
            await refused(scope, receive, send)
            return
        await (self._page if is_page else self._api)(scope, receive, send)

    def close(self) -> None:
        """End the open event streams (call it before stopping the server: they would
        never end by themselves while a run waits, and their readers resume anyway)."""
        self._server.closing.set()


def _json_body(scope: Scope) -> bool:
    """Whether a request says its body is JSON (`application/json`, any parameters)."""
    raw: list[tuple[bytes, bytes]] = scope.get("headers") or []
    for key, value in raw:
        if key.lower() == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


def create_app(config: ServeConfig) -> ServeApp:
    """The ASGI application serving `config`'s agents."""
    return ServeApp(config)
