"""`rerun`: today's definition of an agent against a recorded run, step by step.

Not Temporal replay: hooks and capabilities may change freely. Today's agent runs as a
real `AgentRun` workflow on an in-process worker, so every hook runs exactly as in
production, while a worker interceptor stands in for the outside world:

- every model activity (the run's own and hooks') is answered by the recorded response of
  the request at the same position, whatever model it names (no provider is ever called),
  and today's request is compared with the recorded one (model, messages, tools, settings);
- every tool activity is answered by the recorded result of the same call (same step,
  tool and arguments), or runs the live tool (`tools="live"`); a call the recording does
  not have, or with other arguments, is a divergence;
- at the end, the outcome and the ledger are compared.

The report (`RerunReport`) names the first divergence with a short diff, and both
ledgers side by side. The run goes to the given client's server, or to an embedded dev
server started for the call. Sub-agents (child runs) are not rerun: their recordings are
separate runs.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from towline.activities.io import ModelActivityInput
from towline.activities.model_request import MODEL_ACTIVITY
from towline.agent import Agent
from towline.client import run_error, with_towline
from towline.encryption.codec import EncryptionCodec
from towline.messages import Message, ModelResponse, Usage
from towline.models import FunctionModel
from towline.replay.records import short
from towline.replay.run_history import (
    TOOL_ACTIVITY_PREFIX,
    HistoryReadError,
    RecordedOutcome,
    RecordedRequest,
    RecordedToolCall,
    RunHistory,
    read_histories,
)
from towline.results import Counters, RunInput, RunResult
from towline.runtime.ledger import counters_from_history
from towline.runtime.model_types import ModelInfo
from towline.runtime.request_chain import RequestDefinitions
from towline.storage.payload_store import PayloadStore
from towline.testing.rerun_report import Divergence, RerunReport, request_differences
from towline.testing.rerun_sources import RerunError, embedded_server, histories_of, load_histories

__all__ = ["rerun", "rerun_recording", "load_histories", "embedded_server", "RerunReport", "Divergence",
           "RERUN_MODEL", "RerunError"]

RERUN_MODEL = "towline-rerun"
"""The name the recorded-response model is registered under on the rerun's worker."""
_REQUESTED: contextvars.ContextVar[str] = contextvars.ContextVar("towline_rerun_model", default="")


@dataclass
class _Session:
    """One rerun in progress: the recording, and what today's run did so far."""

    recording: RunHistory
    tools: Literal["recorded", "live"]
    recorded: list[RecordedRequest] = field(default_factory=list[RecordedRequest])
    """The recording's model requests that were answered (or failed for good), in order."""
    recorded_tools: list[RecordedToolCall] = field(default_factory=list[RecordedToolCall])
    """Its tool calls whose activity completed, failed or timed out, in order."""
    divergences: list[tuple[int, int, Divergence]] = field(default_factory=list[tuple[int, int, Divergence]])
    requests: dict[tuple[str, str], int] = field(default_factory=dict[tuple[str, str], int])
    tool_calls: dict[tuple[str, str], int] = field(default_factory=dict[tuple[str, str], int])
    used_tools: set[int] = field(default_factory=set[int])
    others: dict[str, int] = field(default_factory=dict[str, int])

    def diverge(self, rank: int, divergence: Divergence) -> None:
        self.divergences.append((divergence.step or 1 << 30, rank, divergence))

    def answer(self, model: str, messages: list[Message], info: ModelInfo) -> ModelResponse:
        """The recorded response to today's request (noting how the requests differ)."""
        a = activity.info()
        key = (a.workflow_run_id or "", a.activity_id)
        first_time = key not in self.requests
        index = self.requests.setdefault(key, len(self.requests) + 1)
        recorded = self.recorded
        if index > len(recorded):
            if first_time:
                self.diverge(0, Divergence("request", info.run_step, (
                    f"model request {index} ({model}) is not in the recording: today's agent asks "
                    f"the model more often (the recording has {len(recorded)} requests)")))
            raise ApplicationError(f"model request {index} is not in the recording",
                                   type="RerunBeyondRecording", non_retryable=True)
        was = recorded[index - 1]
        if first_time:
            defs = RequestDefinitions(tools=info.tools, output_tools=info.output_tools,
                                      settings=info.settings, output_mode=info.output_mode,
                                      output_schema=info.output_schema)
            notes, diff = request_differences(was.model, was.messages, was.definitions,
                                              was.missing_prefix, model, messages, defs)
            if notes:
                self.diverge(0, Divergence("request", info.run_step, (
                    f"model request {index} ({was.summary or model}) differs: "
                    + "; ".join(notes)), diff))
        if was.failure is not None:
            raise was.failure
        assert was.response is not None
        return was.response

    async def tool(self, name: str, inp: Any, live: Any) -> Any:
        """The recorded result of today's tool call (or the live tool's)."""
        a = activity.info()
        tool = name.removeprefix(TOOL_ACTIVITY_PREFIX)
        fields = _fields(inp)
        step = int(fields.get("run_step") or 0)
        args = cast(dict[str, Any], fields.get("args") or {})
        key = (a.workflow_run_id or "", a.activity_id)
        first_time = key not in self.tool_calls
        match = self.tool_calls.get(key)
        if match is None:
            match = self._match(step, tool, args)
            self.tool_calls[key] = match
        if first_time and match < 0:
            self.diverge(1, Divergence("tool", step, (
                f"tool call {tool}({_args(args)}) is not in the recording"
                + _recorded_calls(self.recorded_tools, step))))
        elif first_time and self.recorded_tools[match].args != args:
            was = self.recorded_tools[match]
            self.diverge(1, Divergence("tool", step, (
                f"tool call {tool}({_args(args)}) differs: the recording called "
                f"{was.tool}({_args(was.args)})")))
        if self.tools == "live":
            return await live()
        if match < 0:
            raise ApplicationError(f"tool call {tool} is not in the recording (rerun with "
                                   "--tools live to run it)", type="RerunBeyondRecording",
                                   non_retryable=True)
        was = self.recorded_tools[match]
        if was.failure is not None:
            raise was.failure
        return was.result

    def _match(self, step: int, tool: str, args: dict[str, Any]) -> int:
        candidates = [i for i, t in enumerate(self.recorded_tools)
                      if i not in self.used_tools and t.step == step and t.tool == tool]
        exact = [i for i in candidates if self.recorded_tools[i].args == args]
        chosen = (exact or candidates or [-1])[0]
        if chosen >= 0:
            self.used_tools.add(chosen)
        return chosen

    def other(self, name: str) -> tuple[bool, Any]:
        """The next recorded result of another activity (an MCP server's tool list)."""
        found = self.recording.others.get(name, [])
        n = self.others.get(name, 0)
        if n >= len(found):
            return False, None
        self.others[name] = n + 1
        return True, found[n]


def _fields(inp: Any) -> dict[str, Any]:
    """A tool activity's input as JSON (a model, or a dynamic activity's raw arguments)."""
    value: Any = inp
    if isinstance(value, list | tuple) and value:  # a dynamic activity's (MCP tools) raw arguments
        value = cast(Sequence[Any], value)[0]
    if isinstance(value, RawValue):
        value = activity.payload_converter().from_payloads([value.payload])[0]
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if not isinstance(value, dict):
        return {}
    fields = dict(cast(dict[str, Any], value))
    ctx = cast(dict[str, Any], fields.get("ctx") or {})
    if not fields.get("run_step"):
        fields["run_step"] = ctx.get("run_step", 0)
    return fields


def _args(args: dict[str, Any]) -> str:
    return short(", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items()), 60)


def _recorded_calls(recorded: list[RecordedToolCall], step: int) -> str:
    calls = [f"{t.tool}({_args(t.args)})" for t in recorded if t.step == step]
    return f" (the recording's calls at step {step}: {', '.join(calls)})" if calls else \
        f" (the recording made no tool call at step {step})"


class _Interceptor(Interceptor):
    """Answers the rerun's model and tool activities from the recording."""

    def __init__(self, sessions: dict[str, _Session]) -> None:
        self.sessions = sessions

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        sessions = self.sessions

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                info = activity.info()
                session = sessions.get(info.workflow_id or "")
                kind = info.activity_type
                if session is None and (kind == MODEL_ACTIVITY or kind.startswith(TOOL_ACTIVITY_PREFIX)):
                    raise ApplicationError(
                        f"{kind} of {info.workflow_id} has no recording (a sub-agent's run is "
                        "not rerun)", type="RerunBeyondRecording", non_retryable=True)
                if session is None:
                    return await super().execute_activity(input)
                if kind == MODEL_ACTIVITY and input.args and isinstance(input.args[0], ModelActivityInput):
                    req = input.args[0]
                    token = _REQUESTED.set(req.model)
                    try:
                        changed = dataclasses.replace(
                            input, args=[req.model_copy(update={"model": RERUN_MODEL}), *input.args[1:]])
                        return await super().execute_activity(changed)
                    finally:
                        _REQUESTED.reset(token)
                if kind.startswith(TOOL_ACTIVITY_PREFIX) and input.args:
                    return await session.tool(kind, input.args[0],
                                              lambda: super(Inbound, self).execute_activity(input))
                if session.tools == "recorded":
                    found, value = session.other(kind)
                    if found:
                        return value
                return await super().execute_activity(input)

        return Inbound(next)


def _recorded_model(sessions: dict[str, _Session]) -> FunctionModel:
    def answer(messages: list[Message], info: ModelInfo) -> ModelResponse:
        session = sessions[activity.info().workflow_id or ""]
        return session.answer(_REQUESTED.get() or info.model_name, messages, info)

    return FunctionModel(answer, model_name=RERUN_MODEL, usage=Usage())


async def rerun(
    history: WorkflowHistory | Sequence[WorkflowHistory] | str | Path,
    agent: Agent,
    *,
    client: Client | None = None,
    tools: Literal["recorded", "live"] = "recorded",
    payload_store: PayloadStore | str | None = None,
    encryption: EncryptionCodec | None = None,
    timeout: timedelta = timedelta(minutes=2),
    ui_base: str | None = None,
) -> RerunReport:
    """Run today's `agent` against a recorded run and report where it departs from it.

    `history` is a `WorkflowHistory` (or the list of a run's executions), a path to an
    exported JSON history (later executions of a continued run are found beside it), or
    a run's workflow id on `client`'s server. The rerun runs on `client`'s server, or on
    an embedded dev server started for the call when `client` is None. `tools`: tool
    results from the recording (default) or from the live tools. `payload_store` and
    `encryption` read a recording whose payloads went to a store or were encrypted.
    `timeout` bounds today's run (one waiting for a human is cut off and reported).
    """
    if tools not in ("recorded", "live"):
        raise ValueError(f"tools must be 'recorded' or 'live', not {tools!r}")
    async with AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(embedded_server())
        histories = await histories_of(history, client)
        return await rerun_recording(histories, agent, client=client, tools=tools,
                                     payload_store=payload_store, encryption=encryption,
                                     timeout=timeout, ui_base=ui_base)
    raise AssertionError("unreachable")  # pragma: no cover


async def rerun_recording(
    histories: Sequence[WorkflowHistory], agent: Agent, *, client: Client,
    tools: Literal["recorded", "live"] = "recorded", payload_store: PayloadStore | str | None = None,
    encryption: EncryptionCodec | None = None, timeout: timedelta = timedelta(minutes=2),
    ui_base: str | None = None,
) -> RerunReport:
    """`rerun` of the histories of one run's executions, on `client`'s server."""
    from towline.testing.harness import execution_histories, towline_worker

    sessions: dict[str, _Session] = {}
    reader = with_towline(client, payload_store=payload_store, encryption=encryption)
    try:
        recording = await read_histories(histories, reader.data_converter)
    except HistoryReadError as e:
        raise RerunError(f"cannot read the recorded run: {e}") from None
    unreadable = next((r for r in recording.requests if r.unreadable), None)
    if unreadable is not None:
        raise RerunError(f"cannot read the recorded run: model request {unreadable.index}: "
                         f"{unreadable.unreadable}")
    try:
        inp = RunInput.model_validate({**recording.raw_input, "agent": agent.name})
    except ValidationError as e:
        raise RerunError(f"the recorded input does not fit today's RunInput: {e.errors()[0]['msg']}") from None
    if inp.session:
        raise RerunError("the recording is a session: rerun does not replay a session's later messages")
    workflow_id = f"rerun-{recording.workflow_id}-{uuid.uuid4().hex[:8]}"
    sessions[workflow_id] = session = _Session(
        recording, tools,
        recorded=[r for r in recording.requests if r.response is not None or r.failure is not None],
        recorded_tools=[t for t in recording.tool_calls
                        if t.ended in ("completed", "failed", "timed-out")])
    async with towline_worker(client, [agent], models={RERUN_MODEL: _recorded_model(sessions)},
                              allowed_models=["*"], payload_store=payload_store,
                              interceptors=[_Interceptor(sessions)]) as (tclient, queue):
        handle = await tclient.start_workflow("AgentRun", inp, id=workflow_id, task_queue=queue,
                                              result_type=RunResult)
        today = await _outcome(handle, timeout)
        chain = await execution_histories(tclient, workflow_id, handle.first_execution_run_id)
    snapshots = counters_from_history(e for h in chain for e in h.events)
    ledger: Counters | None = snapshots[-1] if snapshots else None
    _compare_end(session, recording, today, ledger)
    ordered = [d for _, _, d in sorted(session.divergences, key=lambda t: (t[0], t[1]))]
    url = None
    if ui_base:
        from urllib.parse import quote

        url = f"{ui_base}/namespaces/{quote(client.namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
    return RerunReport(
        recorded_id=recording.workflow_id, rerun_id=workflow_id, agent=agent.name, tools=tools,
        divergences=ordered, recorded=recording.outcome, today=today,
        recorded_ledger=recording.counters, today_ledger=ledger,
        requests=(len(session.recorded), len(session.requests)),
        tool_calls=(len(session.recorded_tools), len(session.tool_calls)), ui_url=url)


async def _outcome(handle: Any, timeout: timedelta) -> RecordedOutcome:
    import asyncio

    try:
        result: RunResult = await asyncio.wait_for(handle.result(), timeout.total_seconds())
    except WorkflowFailureError as e:
        err = run_error(e)
        return RecordedOutcome("failed", reason=err.reason, message=str(err))
    except TimeoutError:
        await handle.terminate(reason="towline rerun: the run did not finish in time")
        return RecordedOutcome("running", message=f"did not finish within {timeout}")
    return RecordedOutcome("succeeded", output=result.output)


def _compare_end(session: _Session, recording: RunHistory, today: RecordedOutcome,
                 ledger: Counters | None) -> None:
    made = len(session.requests)
    for was in session.recorded[made:]:
        session.diverge(0, Divergence("request", was.step, (
            f"model request {made + 1} ({was.summary or was.model}) of the recording is not made "
            f"today (today's run made {made} requests)")))
        break
    for i, was in enumerate(session.recorded_tools):
        if i not in session.used_tools:
            session.diverge(1, Divergence("tool", was.step, (
                f"the recording's tool call {was.tool}({_args(was.args)}) is not made today")))
    if recording.outcome.status == "running":
        return  # a run recorded mid-way: its outcome is not known yet
    was, now = recording.outcome, today
    differs = (was.status != now.status or (was.status == "succeeded" and was.output != now.output)
               or (was.status == "failed" and was.reason != now.reason))
    if differs:
        session.diverge(2, Divergence("output", 0, f"outcome: recorded {was.line()}; today {now.line()}",
                                      [f"-{short(was.to_json(), 200)}", f"+{short(now.to_json(), 200)}"]))
    if not session.divergences and recording.counters is not None and ledger is not None:
        fields = ("run_step", "requests", "tool_calls", "input_tokens", "output_tokens",
                  "output_retries_used")
        changed = [f for f in fields if getattr(recording.counters, f) != getattr(ledger, f)]
        if changed:
            session.diverge(3, Divergence("ledger", 0, "ledger differs: " + ", ".join(
                f"{f} {getattr(recording.counters, f)} -> {getattr(ledger, f)}" for f in changed)))
