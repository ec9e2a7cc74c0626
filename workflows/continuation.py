"""Continue-as-new: when an execution hands its run on, what it carries, what it lets go.

A run continues-as-new when Temporal suggests it (or past the input's test
threshold), between steps and with no handler waiting for an answer only this
execution could give. The next execution's input carries the run's state
(`ResumeState`): the conversation (by reference once over the payload store's
threshold), counters, usage, approvals, inbox, MCP listings, the worker facts and
the last request chain, so its first model request is as small as any other.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from towline.errors import PayloadTooLarge
from towline.messages import UserContent
from towline.results import ResumeState, RunInput, WorkerFacts
from towline.runtime.request_chain import RequestBook, RequestChain

from .approvals import carried as carried_approvals
from .run import Run, oversize

__all__ = ["should_continue", "carried_input", "release", "check_fits"]


def check_fits(value: Any, what: str, limit: int) -> None:
    """Fail the run (not the workflow task, which would retry forever) if `value` is over
    `limit` bytes (the run's payload limit)."""
    size = oversize(value, limit)
    if size:
        raise PayloadTooLarge(f"{what} is {size} bytes, over the {limit}-byte payload limit")


def should_continue(run: Run, inp: RunInput, *, idle: bool) -> bool:
    """Temporal suggests it, or the history passed the run's test threshold.

    Only once this execution has made a step (an execution that continued before
    its first step would continue again at once, forever), and only when `idle`: no
    handler is waiting for an answer only this execution can give.
    """
    info = workflow.info()
    after = inp.continue_as_new_after_events
    started_at = inp.resume.counters.run_step if inp.resume is not None else 0
    return run.ledger.counters.run_step > started_at and idle and (
        info.is_continue_as_new_suggested()
        or (after is not None and info.get_current_history_length() > after)
    )


def carried_input(
    run: Run, inp: RunInput, *, inbox: list[str | list[UserContent]], facts: WorkerFacts,
    chain: RequestChain | None, stream: Any,
) -> RunInput:
    """The next execution's input: the run's state, with the stream's recent events if they
    fit (a convenience, never worth failing for). Encoded once in the usual case: a long
    conversation takes a while to encode."""
    resume = ResumeState(
        messages=run.conversation.messages, state=run.state, counters=run.ledger.counters, usage=run.ledger.usage,
        pending_approvals=run.approvals.pending, root_run_id=run.run_id, inbox=inbox,
        mcp_listings=run.inventory.mcp_listings, facts=facts, chain=chain,
        approvals=carried_approvals(run), handoffs=run.handoffs, instructions=run.instructions,
        guard_requests=run.ledger.guard_requests,
    )
    carried = inp.model_copy(update={"resume": resume, "prompt": None, "message_history": None})
    with_stream = carried.model_copy(update={"resume": resume.model_copy(update={"stream": stream})})
    if not oversize(with_stream, run.payload_limit):
        return with_stream
    check_fits(carried, "the input that continue-as-new would carry", run.payload_limit)
    return carried


def release(run: Run, book: RequestBook, inp: RunInput) -> bool:
    """Let go of this execution's copy of the conversation once the next one's input holds it;
    returns whether it did.

    An execution that continued-as-new is evicted from the worker, and its instance (tasks,
    frames, handlers) becomes cyclic garbage: whatever it still references waits for
    Python's next full collection, which then scans and frees a whole copy of the
    conversation while every workflow on the worker waits for it. On a 10,000-step run such
    collections grew past the 2-second deadlock detector. Emptied here, the lists are freed
    by reference counting as soon as Temporal has written the carried input. Nothing here
    is a command or a decision; a replay (a query on this closed execution) keeps them.
    """
    if workflow.unsafe.is_replaying():
        return False
    run.conversation.release()
    book.release()
    if inp.resume is not None:
        inp.resume.messages.clear()
    return True
