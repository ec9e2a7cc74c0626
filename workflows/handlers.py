"""What reaches a live `AgentRun` from outside: the `send` update and the session's wait,
the `cancel` and `end` signals, and the queries (a base of `AgentRun`).

Kept apart from the run's loop so that `agent_run.py` reads as the loop alone. The handlers
only queue a message or set a flag; the loop acts on them at its next step boundary, so no
handler changes the conversation or the counters in the middle of a step.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from towline.events import EventType, preview
from towline.messages import (
    MESSAGES,
    ModelRequest,
    ModelResponse,
    UserContent,
    UserPart,
    prompt_text,
)
from towline.results import RunInput, RunStatus
from towline.runtime.request_chain import REQUEST_INPUT_QUERY, RequestBook, RequestQuery
from towline.runtime.request_refs import REQUEST_QUERY

from .approval_updates import ApprovalHandlers
from .events import emit
from .run import Run, oversize, run_payload_limit
from .run_input import decode_argument
from .versions import CANCELLED_SESSION, at_least, since

__all__ = ["RunHandlers", "SendInput"]


class SendInput(BaseModel):
    """The argument of the `send` update: the next user message."""

    model_config = ConfigDict(extra="forbid")

    content: str | list[UserContent]
    """The message: text, or a list of text and media parts (like `RunInput.prompt`)."""


def _message(value: Any, *, accepted: bool = False) -> SendInput:
    return decode_argument(SendInput, value, "send", '{"content": "And 2 plus 3?"}',
                           accepted=accepted)


def _too_large(run: Run | None, message: SendInput,
               queued: list[str | list[UserContent]]) -> str | None:
    """Why `message` cannot join the conversation: with it, the next model request would be
    over the payload limit, and the session would fail `PayloadTooLarge` (refused instead).

    The messages `queued` before it (sent while the run was busy) join the conversation
    first, so they count too: each may be small, and all of them together too large."""
    size = oversize(message, 0)
    if size > run_payload_limit():
        return f"the message is {size} bytes, over the {run_payload_limit()}-byte payload limit"
    waiting = oversize(list(queued), 0) if queued else 0
    total = size + waiting + (oversize(list(run.messages), 0) if run is not None else 0)
    if total <= run_payload_limit():
        return None
    if not queued:
        return (f"the message ({size} bytes) would make the conversation {total} bytes, over "
                f"the {run_payload_limit()}-byte payload limit of a model request")
    return (f"the message ({size} bytes) would make the conversation {total} bytes with the "
            f"{len(queued)} message(s) queued before it ({waiting} bytes), over the "
            f"{run_payload_limit()}-byte payload limit of a model request: it was not queued")


class RunHandlers(ApprovalHandlers):
    """Updates, signals and queries of a run, and the session's wait for the next message."""

    _ending: bool
    _ended: bool
    _closed: tuple[str, str] | None
    """Engine 5: why the run ended before answering a `send` still waiting (the run's failure:
    its reason and message), which that `send` fails with, as an `ApplicationError` of that
    type, rather than being left unfinished (Temporal would say only "the Workflow completed
    before the Update completed")."""
    session_end: str | None
    """Why the session stopped waiting for its next message: `request` (the `end` signal) or
    `idle` (its timeout); `RunResult.session_end` (engine 5)."""
    _released: bool
    _sends: int
    _inbox: list[str | list[UserContent]]
    _on_busy: str
    model_in_flight: bool
    interrupt_requested: bool
    _answers: list[tuple[int, Any]]
    _consumed: int
    request_book: RequestBook

    async def _next_session_message(self, run: Run, inp: RunInput) -> bool:
        """In a session, wait for the next `send`; False when the session ends."""
        if not inp.session:
            return False
        engine4 = at_least(4)  # what the run waits for: in its memo, details and timeline
        if engine4:
            run.waiting_for = "message"
        run.confirm(RunStatus.WAITING)
        try:
            await workflow.wait_condition(
                lambda: bool(self._inbox) or self._cancelled or self._ending,
                timeout=inp.session_timeout,
                timeout_summary="session: waiting for the next message" if engine4 else None,
            )
        except TimeoutError:
            self.session_end = "idle"
            return False
        finally:
            run.waiting_for = None
        if self._cancelled:
            if since(CANCELLED_SESSION):
                self._check_cancelled()
            return False
        if not self._inbox:  # `end`: the session is over, with its last answer as output
            self.session_end = "request"
            return False
        run.confirm(RunStatus.RUNNING)
        return True

    def _drain_inbox(self, run: Run) -> None:
        while self._inbox:
            content = self._inbox.pop(0)
            emit(EventType.USER, content=preview(prompt_text(content)))  # streaming
            run.append(ModelRequest(parts=[UserPart(content=content)]))
            self._consumed += 1

    @workflow.update
    async def send(self, message: Any) -> Any:
        """Queue the next user message (a `SendInput`, decoded by the validator); returns the
        answer the run gives to it."""
        self._inbox.append(_message(message, accepted=True).content)
        if self._on_busy == "interrupt" and self.model_in_flight:  # engine 4 (`steering`)
            self.interrupt_requested = True
        target = self._consumed + len(self._inbox)
        self._sends += 1
        try:
            await workflow.wait_condition(
                lambda: any(n >= target for n, _ in self._answers) or self._closed is not None)
        finally:
            self._sends -= 1
        answers = [out for n, out in self._answers if n >= target]
        if not answers and self._closed is not None:  # the run ended first (engine 5)
            reason, said = self._closed
            raise ApplicationError(said, type=reason, non_retryable=True)
        return answers[0]

    async def _close_sends(self, reason: str, message: str) -> None:
        """Engine 5: the run ends (`reason`, `message`) with `send`s still waiting for an
        answer it will not give: each fails with them, and the run ends once they have (none
        is left unfinished), refusing any later `send`."""
        self._ended = True
        if self._sends == 0:
            return
        self._closed = (reason, message)
        await workflow.wait_condition(lambda: self._sends == 0)

    @send.validator
    def _validate_send(self, message: Any) -> None:
        if not prompt_text(_message(message).content).strip():  # a media part is never empty
            raise ValueError("empty message")
        if self._ended:
            raise ValueError("the run has ended; start a new run with its messages as history")
        if (too_large := _too_large(self._run, _message(message), self._inbox)) is not None:
            raise ValueError(too_large)
        run = self._run
        if self._on_busy == "reject" and (run is None or run.status != RunStatus.WAITING
                                          or run.waiting_for != "message"):
            raise ValueError("the run is busy: it takes a message once it has answered "
                             "(on_busy=reject); send it again then")

    @workflow.signal
    def cancel(self) -> None:
        """Cancel the run at its next step boundary (or while it waits): it fails `Cancelled`."""
        self._cancelled = True

    @workflow.signal
    def end(self) -> None:
        """End a session once it has answered what it was sent: it completes with that answer."""
        self._ending = True

    @workflow.query
    def state(self) -> dict[str, Any]:
        """The active agent, counters, status (and what a waiting run waits for), pending
        approvals and client tool calls, contributed state, usage, the run's approval policy,
        remembered decisions, the audit trail and the handoffs so far."""
        run = self._run
        if run is None:
            return {"agent": None, "status": RunStatus.STARTING, "counters": None, "usage": None,
                    "pending_approvals": {}, "state": {}, "waiting_for": None, "remembered": [],
                    "policy": {}, "decisions": [], "decisions_total": 0, "handoffs": []}
        return {
            "agent": run.agent.name, "status": run.status,
            "handoffs": [h.model_dump(mode="json") for h in run.handoffs],
            "counters": run.counters.model_dump(mode="json"),
            "usage": run.usage.model_dump(mode="json"),
            "pending_approvals": run.pending_approvals,
            "state": run.state,
            "waiting_for": run.waiting_for if run.status == RunStatus.WAITING else None,
            "remembered": run.hitl.remembered, "policy": run.hitl.policy,
            "decisions": run.hitl.audit, "decisions_total": run.hitl.total,
        }

    @workflow.query(name=REQUEST_INPUT_QUERY)
    def request_input(self, query: RequestQuery) -> str:
        """An in-flight model request's messages (after a key the worker holds) and
        definitions, as JSON: what a model activity's worker lacks (`towline.runtime.request_chain`)."""
        return self.request_book.answer(query).model_dump_json()

    @workflow.query(name=REQUEST_QUERY)
    def request_messages(self, key: str) -> str:
        """The full messages of an in-flight model request, as JSON (the earlier protocol's
        query, for activities scheduled by earlier code)."""
        pending = self.request_book.pending.get(int(key)) if key.isdigit() else None
        if pending is None:
            raise ValueError(f"no model request {key!r} is in flight")
        return MESSAGES.dump_json(pending.messages).decode()

    @workflow.query
    def messages(self) -> list[ModelRequest | ModelResponse]:
        """The canonical history so far."""
        if self._released:  # never an empty answer that looks like a conversation
            raise ValueError("this execution has continued as new: its conversation is in the "
                             "next execution (query the workflow without a run id)")
        return list(self._run.messages) if self._run else []
