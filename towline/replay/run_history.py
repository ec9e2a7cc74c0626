"""A run read back from its Temporal history: the one reader of what a run recorded.

`read_run_history` (a run on the server) and `read_histories` (histories in hand: exported
JSON, one replayed execution) give a `RunHistory` (`towline.replay.records`):

- every model request, the run's own and its hooks', with the messages it sent and what
  came back. A request travels by reference (`towline.runtime.request_chain`): its input
  names the messages sent before by one chain key and carries only the new ones, so the
  messages are rebuilt here the way a worker rebuilds them (`RequestRebuilder`), from the
  requests and responses earlier in the history (and from the previous executions' across
  continue-as-new). A message too large to be written twice is named by content only; it is
  found among the messages the history holds whole (the run's input, a continued
  execution's carried conversation, the result or the failure's partial run), else it
  stays a placeholder. A request made outside an `AgentRun` carries its messages inline.
- every tool activity: its tool, call id, step, whether the tool is declared idempotent,
  its outcome and result. A call with no outcome yet is `running` whatever
  `ActivityTaskStarted` says: Temporal records an attempt's start only when it ends, so a
  call in its first attempt shows none, and it may have taken effect.
- the contributed state recorded at each confirmed transition (memo `towline.state`,
  see `towline.timetravel.lineage`) and carried into each continued execution;
  how the run ended, and its last confirmed ledger.

The executions of a run on the server are those of its current path: from its latest
execution back through `continued_execution_run_id`, so a run that was reset is read along
its new path, not the one it left. Payloads are decoded with the given data converter (its
codec and payload store); one that cannot be decoded is a `HistoryReadError`, unless
`lenient` (replay's check, which compares what it can).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from towline.messages import Message
from towline.replay.history_reader import TOOL_ACTIVITY_PREFIX, HistoryReader, request_digest
from towline.replay.records import (
    HistoryReadError,
    RecordedOutcome,
    RecordedRequest,
    RecordedToolCall,
    RunHistory,
)
from towline.results import RunInput
from towline.runtime.ledger import counters_from_history

__all__ = ["recorded_conversation", "RunHistory", "RecordedRequest", "RecordedToolCall", "RecordedOutcome",
           "HistoryReadError", "read_run_history", "read_histories", "read_executions",
           "request_digest", "TOOL_ACTIVITY_PREFIX"]

Execution = tuple[str, Sequence[HistoryEvent]]
"""(Temporal run id, events) of one execution."""

_E = EventType


async def read_run_history(client: Client, workflow_id: str) -> RunHistory:
    """Read run `workflow_id` (all executions of its current path) from its history."""
    return await read_executions(workflow_id, await _executions(client, workflow_id),
                                 client.data_converter)


async def recorded_conversation(histories: Sequence[WorkflowHistory], converter: DataConverter
                                ) -> tuple[list[Message] | None, str | None]:
    """A run's conversation as its histories record it (`RunHistory.conversation`), for a
    reader no worker answers, and a note saying so (None, None: they cannot be read).
    Messages the history names only by reference are left out, and the note says how many."""
    try:
        run = await read_histories(histories, converter)
    except HistoryReadError:
        return None, None
    found = run.conversation()
    messages = [m for m in found if not isinstance(m, str)]
    left_out = len(found) - len(messages)
    return messages, ("(the conversation as the run's history records it" + (
        f"; {left_out} message(s) it names only by reference left out)" if left_out else ")"))


async def read_histories(histories: Sequence[WorkflowHistory], converter: DataConverter, *,
                         lenient: bool = False) -> RunHistory:
    """Read a run from the histories of its executions, first to last."""
    if not histories or not histories[0].events:
        raise HistoryReadError("the history is empty")
    executions = [(h.events[0].workflow_execution_started_event_attributes
                   .original_execution_run_id, h.events) for h in histories]
    return await read_executions(histories[0].workflow_id, executions, converter,
                                 lenient=lenient)


async def read_executions(workflow_id: str, executions: Sequence[Execution],
                          converter: DataConverter, *, lenient: bool = False) -> RunHistory:
    """Read a run from its executions' events, first to last."""
    first = executions[0][1][0] if executions and executions[0][1] else None
    if first is None or first.event_type != _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise HistoryReadError(f"the history of {workflow_id!r} has no start event")
    started = first.workflow_execution_started_event_attributes
    if started.workflow_type.name != "AgentRun":
        raise HistoryReadError(f"workflow {workflow_id!r} is a {started.workflow_type.name}, "
                               "not an AgentRun")
    reader = HistoryReader(converter, lenient)
    raw: Any = await reader.decode(started.input.payloads)
    try:
        inp: RunInput | None = RunInput.model_validate(raw)
    except ValidationError:
        inp = None
    fields = cast(dict[str, Any], raw) if isinstance(raw, dict) else {}
    run = RunHistory(workflow_id=workflow_id, input=inp, task_queue=started.task_queue.name,
                     executions=[run_id for run_id, _ in executions],
                     raw_input={k: v for k, v in fields.items() if k != "resume"})
    for _, events in executions:  # whole messages first, for the references
        inputs = events[0].workflow_execution_started_event_attributes.input.payloads
        await reader.know_payloads(inputs, "message_history")
        await reader.know_payloads(inputs, "resume")
        run.outcome = await reader.outcome(events[-1])
    for index, (run_id, events) in enumerate(executions):
        if index > 0:
            raw_next: Any = await reader.decode(
                events[0].workflow_execution_started_event_attributes.input.payloads)
            resume: Any = raw_next.get("resume") if isinstance(raw_next, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            state: Any = resume.get("state") if isinstance(resume, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(state, dict):
                run.states.append(((index, 0), dict(state)))  # pyright: ignore[reportUnknownArgumentType]
        await reader.read_execution(run, index, run_id, events)
    snapshots = counters_from_history([e for _, events in executions for e in events])
    run.counters = snapshots[-1] if snapshots else None
    return run


async def _history(client: Client, workflow_id: str, run_id: str | None) -> Execution:
    """(run id, events) of one execution (None: the latest)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        if run_id is None:  # a reset execution's start event names the run it was reset from
            run_id = (await handle.describe()).run_id
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise HistoryReadError(f"no run {workflow_id!r} in namespace {client.namespace!r}") \
                from None
        raise HistoryReadError(f"cannot read the history of {workflow_id!r}: {e.message}") \
            from None
    return run_id, list(history.events)


async def _executions(client: Client, workflow_id: str) -> list[Execution]:
    """(run id, events) of each execution of the run's current path, first to last."""
    run_id, events = await _history(client, workflow_id, None)
    chain: list[Execution] = []
    while True:
        if not events or not events[0].HasField("workflow_execution_started_event_attributes"):
            raise HistoryReadError(f"the history of {workflow_id!r} has no start event")
        chain.insert(0, (run_id, events))
        previous = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not previous:
            return chain
        run_id, events = await _history(client, workflow_id, previous)
